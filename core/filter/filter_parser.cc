// The filter language's lexer and recursive-descent parser (grammar in docs/filtering.md).
// Recursion is bounded by kMaxFilterDepth: each '(' and each `not` counts one level.
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/filter/filter.h"

namespace shoal::core::filter {
namespace {

struct Token {
  enum class Kind { kEnd, kIdent, kQuotedKey, kString, kInt, kDouble, kPunct };
  Kind kind = Kind::kEnd;
  size_t pos = 0;
  std::string_view text;  // as written
  std::string value;      // kString, kQuotedKey: unescaped; kIdent: the name
};

bool IsIdentStart(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; }
bool IsIdentChar(char c) { return IsIdentStart(c) || (c >= '0' && c <= '9') || c == '.'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(char(cp));
  } else if (cp < 0x800) {
    out->push_back(char(0xC0 | (cp >> 6)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(char(0xE0 | (cp >> 12)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(char(0xF0 | (cp >> 18)));
    out->push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  }
}

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  absl::StatusOr<Expr> Run() {
    if (text_.size() > kMaxFilterBytes) {
      return absl::InvalidArgumentError(absl::StrCat("filter: at byte ", kMaxFilterBytes,
                                                     ": longer than the limit of ", kMaxFilterBytes,
                                                     " bytes (", text_.size(), " bytes)"));
    }
    if (!Next()) return error_;
    Expr e;
    if (!ParseOr(&e)) return error_;
    if (tok_.kind != Token::Kind::kEnd) {
      Fail("'and', 'or' or the end");
      return error_;
    }
    return e;
  }

 private:
  // Both record the first error and return false, for `return Fail(...)`.
  bool Fail(std::string_view expected) {
    if (error_.ok()) {
      const std::string found = tok_.kind == Token::Kind::kEnd
                                    ? std::string("the end")
                                    : absl::StrCat("'", std::string(tok_.text.substr(0, 40)), "'");
      error_ = absl::InvalidArgumentError(absl::StrCat("filter: at byte ", tok_.pos, ": expected ",
                                                       std::string(expected), ", found ", found));
    }
    return false;
  }
  bool FailAt(size_t pos, std::string_view what) {
    if (error_.ok()) {
      error_ = absl::InvalidArgumentError(
          absl::StrCat("filter: at byte ", pos, ": ", std::string(what)));
    }
    return false;
  }

  bool IsPunct(std::string_view p) const {
    return tok_.kind == Token::Kind::kPunct && tok_.text == p;
  }
  bool IsWord(std::string_view w) const {
    return tok_.kind == Token::Kind::kIdent && tok_.value == w;
  }

  // Lexes the next token into tok_; false on a lexical error (error_ set).
  bool Next() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
    tok_ = Token{};
    tok_.pos = pos_;
    if (pos_ >= text_.size()) return true;
    const char c = text_[pos_];
    const size_t start = pos_;
    if (IsIdentStart(c)) {
      while (pos_ < text_.size() && IsIdentChar(text_[pos_])) ++pos_;
      tok_.kind = Token::Kind::kIdent;
      tok_.value = std::string(text_.substr(start, pos_ - start));
    } else if (c == '"') {
      if (!LexString()) return false;
    } else if (c == '`') {
      if (!LexQuotedKey()) return false;
    } else if (IsDigit(c) || (c == '-' && pos_ + 1 < text_.size() && IsDigit(text_[pos_ + 1]))) {
      if (!LexNumber()) return false;
    } else if (c == '!' || c == '<' || c == '>') {
      pos_ += (pos_ + 1 < text_.size() && text_[pos_ + 1] == '=') ? 2 : 1;
      tok_.kind = Token::Kind::kPunct;
      if (c == '!' && pos_ - start == 1) {
        tok_.text = text_.substr(start, 1);
        return Fail("'!='");
      }
    } else if (c == '=' || c == '(' || c == ')' || c == '[' || c == ']' || c == ',') {
      ++pos_;
      tok_.kind = Token::Kind::kPunct;
    } else {
      tok_.kind = Token::Kind::kPunct;
      tok_.text = text_.substr(start, 1);
      return Fail("a field, a literal or an operator");
    }
    tok_.text = text_.substr(start, pos_ - start);
    return true;
  }

  bool LexString() {
    const size_t start = pos_++;
    std::string out;
    while (pos_ < text_.size() && text_[pos_] != '"') {
      char c = text_[pos_++];
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (pos_ >= text_.size()) break;
      const size_t esc = pos_ - 1;
      switch (c = text_[pos_++]) {
        case '"':
        case '\\':
        case '/':
          out.push_back(c);
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 'u': {
          uint32_t cp = 0;
          if (!Hex4(&cp)) return FailAt(esc, "expected 4 hex digits after \\u");
          if (cp >= 0xDC00 && cp <= 0xDFFF) return FailAt(esc, "a lone low surrogate \\u");
          if (cp >= 0xD800 && cp <= 0xDBFF) {  // a pair: \uD83D\uDE00 is one code point
            uint32_t low = 0;
            if (pos_ + 2 > text_.size() || text_[pos_] != '\\' || text_[pos_ + 1] != 'u' ||
                (pos_ += 2, !Hex4(&low)) || low < 0xDC00 || low > 0xDFFF) {
              return FailAt(esc, "a high surrogate \\u must be followed by a low one");
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          AppendUtf8(cp, &out);
          break;
        }
        default:
          FailAt(esc, absl::StrCat("unknown escape '\\", std::string(1, c), "' in a string"));
          return false;
      }
    }
    if (pos_ >= text_.size()) {
      FailAt(start, "a string that is never closed (expected '\"')");
      return false;
    }
    ++pos_;
    tok_.kind = Token::Kind::kString;
    tok_.value = std::move(out);
    return true;
  }

  // Four hex digits at pos_ into *cp (and past them); false if they are not there.
  bool Hex4(uint32_t* cp) {
    if (pos_ + 4 > text_.size()) return false;
    for (size_t i = 0; i < 4; ++i) {
      const char h = text_[pos_ + i];
      if (!IsDigit(h) && !((h >= 'a' && h <= 'f') || (h >= 'A' && h <= 'F'))) return false;
    }
    std::from_chars(text_.data() + pos_, text_.data() + pos_ + 4, *cp, 16);
    pos_ += 4;
    return true;
  }

  bool LexQuotedKey() {
    const size_t start = pos_++;
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) {
        FailAt(start, "a backquoted key that is never closed (expected '`')");
        return false;
      }
      if (text_[pos_] == '`') {
        if (pos_ + 1 < text_.size() && text_[pos_ + 1] == '`') {
          out.push_back('`');
          pos_ += 2;
          continue;
        }
        ++pos_;
        break;
      }
      out.push_back(text_[pos_++]);
    }
    if (out.empty() || out.size() > 256) {
      FailAt(start, "a backquoted key must be 1 to 256 bytes");
      return false;
    }
    tok_.kind = Token::Kind::kQuotedKey;
    tok_.value = std::move(out);
    return true;
  }

  bool LexNumber() {
    const size_t start = pos_;
    if (text_[pos_] == '-') ++pos_;
    bool is_double = false;
    while (pos_ < text_.size() && IsDigit(text_[pos_])) ++pos_;
    if (pos_ < text_.size() && text_[pos_] == '.') {
      is_double = true;
      ++pos_;
      if (pos_ >= text_.size() || !IsDigit(text_[pos_])) {
        return FailAt(start, "expected digits after the '.' of a number");
      }
      while (pos_ < text_.size() && IsDigit(text_[pos_])) ++pos_;
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      is_double = true;
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (pos_ >= text_.size() || !IsDigit(text_[pos_])) {
        FailAt(start, "expected digits in the exponent of a number");
        return false;
      }
      while (pos_ < text_.size() && IsDigit(text_[pos_])) ++pos_;
    }
    if (pos_ < text_.size() && IsIdentChar(text_[pos_])) {
      FailAt(start, "a number runs into letters");
      return false;
    }
    tok_.kind = is_double ? Token::Kind::kDouble : Token::Kind::kInt;
    tok_.value = std::string(text_.substr(start, pos_ - start));
    return true;
  }

  bool Descend() {
    if (++depth_ > kMaxFilterDepth) {
      FailAt(tok_.pos, absl::StrCat("nested deeper than ", kMaxFilterDepth, " levels"));
      return false;
    }
    return true;
  }

  // or_expr := and_expr ('or' and_expr)*
  bool ParseOr(Expr* out) { return ParseChain("or", Expr::Kind::kOr, &Parser::ParseAnd, out); }

  // and_expr := unary ('and' unary)*
  bool ParseAnd(Expr* out) { return ParseChain("and", Expr::Kind::kAnd, &Parser::ParseUnary, out); }

  // operand (word operand)*: one `kind` node over two or more operands (a flat chain is one
  // level of depth), or the operand itself.
  bool ParseChain(std::string_view word, Expr::Kind kind, bool (Parser::*operand)(Expr*),
                  Expr* out) {
    Expr first;
    if (!(this->*operand)(&first)) return false;
    if (!IsWord(word)) {
      *out = std::move(first);
      return true;
    }
    out->kind = kind;
    out->children.push_back(std::move(first));
    while (IsWord(word)) {
      if (!Next()) return false;
      out->children.emplace_back();
      if (!(this->*operand)(&out->children.back())) return false;
    }
    return true;
  }

  // unary := 'not' unary | '(' or_expr ')' | 'exists' '(' field ')' | field comparison
  bool ParseUnary(Expr* out) {
    if (IsWord("not")) {
      if (!Descend() || !Next()) return false;
      out->kind = Expr::Kind::kNot;
      out->children.emplace_back();
      if (!ParseUnary(&out->children.back())) return false;
      --depth_;
      return true;
    }
    if (IsPunct("(")) {
      if (!Descend() || !Next() || !ParseOr(out)) return false;
      if (!IsPunct(")")) return Fail("')'");
      --depth_;
      return Next();
    }
    if (IsWord("exists")) {
      if (!Next()) return false;
      if (!IsPunct("(")) return Fail("'(' after exists");
      if (!Next() || !ParseField(&out->field)) return false;
      if (!IsPunct(")")) return Fail("')'");
      out->kind = Expr::Kind::kExists;
      return Next();
    }
    return ParseField(&out->field) && ParseComparison(out);
  }

  bool ParseField(FieldRef* field) {
    static constexpr std::string_view kKeywords[] = {"and",    "or",   "not",  "in",
                                                     "exists", "true", "false"};
    if (tok_.kind == Token::Kind::kQuotedKey) {
      field->key = tok_.value;
      return Next();
    }
    if (tok_.kind != Token::Kind::kIdent) return Fail("a field name");
    for (std::string_view k : kKeywords) {
      if (tok_.value == k) return Fail("a field name (backquote a key that is a keyword)");
    }
    if (tok_.value.size() > 256) return FailAt(tok_.pos, "a field name is at most 256 bytes");
    if (tok_.value == "id") {
      field->is_id = true;
    } else {
      field->key = tok_.value;
    }
    return Next();
  }

  bool ParseComparison(Expr* out) {
    static constexpr std::pair<std::string_view, CompareOp> kOps[] = {
        {"=", CompareOp::kEq},  {"!=", CompareOp::kNe}, {"<", CompareOp::kLt},
        {"<=", CompareOp::kLe}, {">", CompareOp::kGt},  {">=", CompareOp::kGe}};
    for (const auto& [text, op] : kOps) {
      if (!IsPunct(text)) continue;
      out->kind = Expr::Kind::kCompare;
      out->op = op;
      if (!Next()) return false;
      out->literals.emplace_back();
      const size_t at = tok_.pos;
      if (!ParseLiteral(out->field, &out->literals.back())) return false;
      if (op != CompareOp::kEq && op != CompareOp::kNe &&
          std::holds_alternative<bool>(out->literals.back())) {
        return FailAt(at, "true and false compare only with = and !=");
      }
      return true;
    }
    out->kind = Expr::Kind::kIn;
    if (IsWord("not")) {
      out->kind = Expr::Kind::kNotIn;
      if (!Next()) return false;
      if (!IsWord("in")) return Fail("'in' after 'not'");
    } else if (!IsWord("in")) {
      return Fail("a comparison (=, !=, <, <=, >, >=, in, not in)");
    }
    if (!Next()) return false;
    if (!IsPunct("[")) return Fail("'['");
    if (!Next()) return false;
    while (!IsPunct("]")) {
      if (!out->literals.empty()) {
        if (!IsPunct(",")) return Fail("',' or ']'");
        if (!Next()) return false;
      }
      out->literals.emplace_back();
      if (!ParseLiteral(out->field, &out->literals.back())) return false;
    }
    return Next();
  }

  bool ParseLiteral(const FieldRef& field, Literal* out) {
    const Token t = tok_;
    switch (t.kind) {
      case Token::Kind::kString:
        *out = t.value;
        break;
      case Token::Kind::kInt: {
        int64_t i = 0;
        auto r = std::from_chars(t.value.data(), t.value.data() + t.value.size(), i);
        if (r.ec == std::errc() && r.ptr == t.value.data() + t.value.size()) {
          *out = i;
          break;
        }
        uint64_t u = 0;
        r = std::from_chars(t.value.data(), t.value.data() + t.value.size(), u);
        if (field.is_id && r.ec == std::errc() && r.ptr == t.value.data() + t.value.size()) {
          *out = u;
          break;
        }
        return FailAt(t.pos, field.is_id
                                 ? "an id literal must be within -2^63 .. 18446744073709551615"
                                 : "an integer must fit in 64 bits (-2^63 .. 2^63-1)");
      }
      case Token::Kind::kDouble: {
        // from_chars, not strtod: the same in every locale.
        double d = 0;
        auto r = std::from_chars(t.value.data(), t.value.data() + t.value.size(), d);
        if (r.ec != std::errc() || r.ptr != t.value.data() + t.value.size() || !std::isfinite(d)) {
          return FailAt(t.pos,
                        "a decimal must be within the range of a double (about 1e-308 "
                        "to 1.8e308 in magnitude, or 0)");
        }
        *out = d;
        break;
      }
      case Token::Kind::kIdent:
        if (t.value == "true" || t.value == "false") {
          *out = t.value == "true";
          break;
        }
        [[fallthrough]];
      default:
        return Fail("a literal (a \"string\", a number, true or false)");
    }
    if (field.is_id && !std::holds_alternative<int64_t>(*out) &&
        !std::holds_alternative<uint64_t>(*out)) {
      return FailAt(t.pos, "id compares only with integers");
    }
    return Next();
  }

  std::string_view text_;
  size_t pos_ = 0;
  int depth_ = 0;
  Token tok_;
  absl::Status error_;
};

}  // namespace

absl::StatusOr<Filter> Filter::Parse(std::string_view text) {
  absl::StatusOr<Expr> root = Parser(text).Run();
  if (!root.ok()) return root.status();
  return Filter(std::string(text), *std::move(root));
}

}  // namespace shoal::core::filter
