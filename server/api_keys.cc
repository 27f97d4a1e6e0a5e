#include "server/api_keys.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace shoal::server {

std::vector<std::string> ParseApiKeys(absl::string_view text) {
  std::vector<std::string> keys;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    keys.emplace_back(line);
  }
  return keys;
}

ApiKeys::ApiKeys(std::string static_key, std::string file)
    : file_(std::move(file)), enabled_(!static_key.empty() || !file_.empty()) {
  if (!static_key.empty()) static_digest_.push_back(Hash(static_key));
}

absl::StatusOr<std::unique_ptr<ApiKeys>> ApiKeys::Create(std::string static_key, std::string file) {
  auto keys = std::unique_ptr<ApiKeys>(new ApiKeys(std::move(static_key), std::move(file)));
  if (!keys->file_.empty()) {
    if (auto loaded = keys->Reload(); !loaded.ok()) return loaded.status();
  }
  return keys;
}

absl::StatusOr<size_t> ApiKeys::Reload() {
  if (file_.empty()) return static_digest_.size();
  std::ifstream in(file_);
  if (!in.is_open()) {
    return absl::InvalidArgumentError(
        absl::StrCat("server.api_key_file: cannot open '", file_, "'"));
  }
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return absl::InvalidArgumentError(
        absl::StrCat("server.api_key_file: cannot read '", file_, "'"));
  }
  std::vector<Digest> digests;
  for (const std::string& key : ParseApiKeys(text.str())) digests.push_back(Hash(key));
  absl::MutexLock l(&mu_);
  file_digests_ = std::move(digests);
  return file_digests_.size() + static_digest_.size();
}

ApiKeys::Digest ApiKeys::Hash(absl::string_view key) {
  Digest d;
  SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(), d.data());
  return d;
}

bool ApiKeys::Accepts(absl::string_view key) const {
  if (key.empty()) return false;
  const Digest got = Hash(key);
  // Every key is compared, match or not: the time does not depend on which one matched.
  int matches = 0;
  for (const Digest& d : static_digest_) {
    matches |= CRYPTO_memcmp(got.data(), d.data(), d.size()) == 0;
  }
  absl::MutexLock l(&mu_);
  for (const Digest& d : file_digests_) {
    matches |= CRYPTO_memcmp(got.data(), d.data(), d.size()) == 0;
  }
  return matches != 0;
}

bool ApiKeys::AcceptsAuthorization(absl::string_view header) const {
  constexpr absl::string_view kBearer = "Bearer ";  // the scheme is case-insensitive (RFC 7235)
  if (!absl::StartsWithIgnoreCase(header, kBearer)) return false;
  return Accepts(header.substr(kBearer.size()));
}

}  // namespace shoal::server
