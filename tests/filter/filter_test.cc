// The filter language: parsing (every operator, literal and error path with its byte) and the
// semantics table of docs/filtering.md, evaluated by Filter::Matches.
#include "core/filter/filter.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>

namespace shoal::core::filter::filter_test {
namespace {

using ::testing::HasSubstr;

const Attributes& Point() {
  static const Attributes kPoint = {
      {"n", int64_t(3)},
      {"big", int64_t(9007199254740993)},  // 2^53 + 1: not a double
      {"x", 2.5},
      {"s", std::string("abc")},
      {"utf", std::string("\xc3\xa9t\xc3\xa9")},  // "été"
      {"b", true},
      {"tags", AttributeList{std::string("a"), std::string("b"), int64_t(7)}},
      {"empty", AttributeList{}},
      {"id", int64_t(-1)},
      {"with space", int64_t(1)},
      {"a.b", std::string("dotted")},
  };
  return kPoint;
}

bool M(const std::string& text, uint64_t id = 42) {
  auto f = Filter::Parse(text);
  EXPECT_TRUE(f.ok()) << text << ": " << f.status();
  return f.ok() && f->Matches(id, Point());
}

void ExpectError(const std::string& text, size_t byte, const std::string& what) {
  auto f = Filter::Parse(text);
  ASSERT_FALSE(f.ok()) << text;
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(f.status().message()), HasSubstr("at byte " + std::to_string(byte)))
      << text;
  EXPECT_THAT(std::string(f.status().message()), HasSubstr(what)) << text;
}

TEST(Filter, ComparisonsOnIntsDoublesStringsAndBools) {
  EXPECT_TRUE(M("n = 3"));
  EXPECT_FALSE(M("n != 3"));
  EXPECT_TRUE(M("n < 4") && M("n <= 3") && M("n > 2") && M("n >= 3"));
  EXPECT_FALSE(M("n < 3") || M("n > 3"));
  EXPECT_TRUE(M("n = 3.0"));  // ints and doubles compare numerically
  EXPECT_TRUE(M("n < 3.5") && M("x > 2") && M("x < 3") && M("x = 2.5"));
  EXPECT_TRUE(M("x >= -1e3"));
  // Exactly: 2^53 + 1 is not the double 9007199254740992.
  EXPECT_FALSE(M("big = 9007199254740992.0"));
  EXPECT_TRUE(M("big > 9007199254740992.0"));
  EXPECT_TRUE(M("big = 9007199254740993"));
  EXPECT_TRUE(M("s = \"abc\"") && M("s < \"abd\"") && M("s > \"ab\""));
  EXPECT_TRUE(M("utf > \"z\""));  // bytewise: 0xc3 > 'z'
  EXPECT_TRUE(M("b = true") && M("b != false"));
  EXPECT_FALSE(M("b = false"));
}

TEST(Filter, MissingFieldsAndOtherKindsAreFalseAndNotNegates) {
  EXPECT_FALSE(M("missing = 1"));
  EXPECT_FALSE(M("missing != 1"));  // != needs the field
  EXPECT_TRUE(M("not (missing = 1)"));
  EXPECT_FALSE(M("s = 3") || M("s != 3") || M("n = \"3\"") || M("b = 1") || M("n != true"));
  EXPECT_FALSE(M("s in [1, 2]"));
  EXPECT_FALSE(M("s not in [1, 2]"));  // not comparable with any literal
  EXPECT_TRUE(M("exists(n)") && M("exists(empty)") && !M("exists(missing)"));
  EXPECT_TRUE(M("not exists(missing)"));
}

TEST(Filter, InNotInAndLists) {
  EXPECT_TRUE(M("n in [1, 3]") && M("n in [\"x\", 3.0]") && !M("n in []"));
  EXPECT_TRUE(M("n not in [1, 2]") && !M("n not in [3]") && M("n not in []"));
  EXPECT_TRUE(M("tags = \"a\"") && M("tags = 7") && M("tags in [\"z\", \"b\"]"));
  EXPECT_FALSE(M("tags = \"c\""));
  EXPECT_TRUE(M("tags != \"a\""));  // some element is not "a"
  EXPECT_FALSE(M("not (tags = \"a\")"));
  EXPECT_TRUE(M("tags > 6") && !M("tags > 7"));
  EXPECT_TRUE(M("tags not in [\"a\"]"));          // "b" is a string and not "a"
  EXPECT_FALSE(M("tags not in [\"a\", \"b\"]"));  // 7 compares with no string literal
  EXPECT_FALSE(M("empty = 1") || M("empty != 1") || M("empty not in []"));
}

TEST(Filter, AndOrNotPrecedenceAndParentheses) {
  EXPECT_TRUE(M("n = 1 or n = 3 and s = \"abc\""));
  EXPECT_FALSE(M("(n = 1 or n = 3) and s = \"x\""));
  EXPECT_TRUE(M("not n = 1 and n = 3"));  // (not n = 1) and n = 3
  EXPECT_TRUE(M("not not n = 3"));
  EXPECT_TRUE(M("n = 3 and (s = \"x\" or (b = true and x > 2))"));
}

TEST(Filter, IdPseudoFieldAndBackquotedKeys) {
  EXPECT_TRUE(M("id = 42") && M("id in [1, 42]") && M("id > -5") && !M("id < 42"));
  EXPECT_TRUE(M("`id` = -1"));  // the attribute named id
  EXPECT_TRUE(M("exists(id)"));
  const uint64_t huge = std::numeric_limits<uint64_t>::max();
  EXPECT_TRUE(M("id = 18446744073709551615", huge));
  EXPECT_TRUE(M("id > 9223372036854775807", huge));
  EXPECT_FALSE(M("id > 9223372036854775807", 5));
  EXPECT_TRUE(M("`with space` = 1") && M("a.b = \"dotted\"") && M("`a.b` = \"dotted\""));
  auto f = Filter::Parse("`x``y` = 1 and n > 0 or id = 1 and `n` < 9");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->AttributeKeys(), (std::vector<std::string>{"n", "x`y"}));
}

TEST(Filter, StringEscapes) {
  Attributes a = {{"s", std::string("q\"\\/\n\t\r\xc3\xa9")}};
  auto f = Filter::Parse(R"(s = "q\"\\\/\n\t\r\u00e9")");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(f->Matches(1, a));
  ExpectError(R"(s = "\x")", 5, "unknown escape");
  ExpectError(R"(s = "\u12")", 5, "4 hex digits");
  ExpectError("s = \"abc", 4, "never closed");
  // A surrogate pair is one code point, in 4 UTF-8 bytes; a lone surrogate is refused.
  auto emoji = Filter::Parse(R"(s = "\ud83d\ude00")");
  ASSERT_TRUE(emoji.ok()) << emoji.status();
  EXPECT_TRUE(emoji->Matches(1, {{"s", std::string("\xf0\x9f\x98\x80")}}));
  ExpectError(R"(s = "\ud83d")", 5, "followed by a low one");
  ExpectError(R"(s = "\ud83dx")", 5, "followed by a low one");
  ExpectError(R"(s = "\ude00")", 5, "lone low surrogate");
}

TEST(Filter, EveryErrorNamesItsByte) {
  ExpectError("", 0, "expected a field name, found the end");
  ExpectError("   ", 3, "expected a field name");
  ExpectError("n = = 3", 4, "expected a literal");
  ExpectError("n = 3 )", 6, "expected 'and', 'or' or the end");
  ExpectError("n 3", 2, "expected a comparison");
  ExpectError("(n = 3", 6, "expected ')'");
  ExpectError("n in [1 2]", 8, "expected ',' or ']'");
  ExpectError("n not 3", 6, "'in' after 'not'");
  ExpectError("and = 1", 0, "a field name");
  ExpectError("n = 3 & m = 1", 6, "a field, a literal or an operator");
  ExpectError("n ! 3", 2, "'!='");
  ExpectError("n = 9223372036854775808", 4, "64 bits");
  ExpectError("id = 18446744073709551616", 5, "within -2^63 .. 18446744073709551615");
  ExpectError("id = \"x\"", 5, "id compares only with integers");
  ExpectError("b < true", 4, "only with = and !=");
  ExpectError("x = 1e999", 4, "range of a double");
  ExpectError("x = 1e-400", 4, "range of a double");
  ExpectError("x = 1.", 4, "digits after the '.'");
  ExpectError("x = -.5", 4, "a field, a literal or an operator");
  ExpectError("id = -9223372036854775809", 5, "within -2^63");
  ExpectError("x = 1e", 4, "exponent");
  ExpectError("x = 12ab", 4, "runs into letters");
  ExpectError("`` = 1", 0, "1 to 256 bytes");
  ExpectError("`abc = 1", 0, "never closed");
  ExpectError("exists n", 7, "'(' after exists");
}

TEST(Filter, LimitsOnSizeAndDepth) {
  std::string deep32, deep33;
  for (int i = 0; i < 32; ++i) deep32 += "(";
  deep32 += "n = 3";
  for (int i = 0; i < 32; ++i) deep32 += ")";
  EXPECT_TRUE(M(deep32));
  deep33 = "(" + deep32 + ")";
  ExpectError(deep33, 32, "nested deeper than 32");
  std::string nots;
  for (int i = 0; i < 33; ++i) nots += "not ";
  ExpectError(nots + "n = 3", 128, "nested deeper than 32");
  // A long flat chain is one level.
  std::string chain = "n = 3";
  while (chain.size() < 4000) chain += " or n = 1";
  EXPECT_TRUE(M(chain));
  std::string big(4097, ' ');
  big.replace(0, 5, "n = 3");
  auto f = Filter::Parse(big);
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(std::string(f.status().message()), HasSubstr("at byte 4096"));
  EXPECT_THAT(std::string(f.status().message()), HasSubstr("(4097 bytes)"));
}

}  // namespace
}  // namespace shoal::core::filter::filter_test
