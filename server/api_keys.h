// ApiKeys: the keys a request may present as `authorization: Bearer <key>` — the one from
// server.api_key (flag, SHOAL_API_KEY or YAML) plus every key in server.api_key_file (one per
// line; blank lines and lines starting with '#' are ignored; surrounding spaces trimmed).
// Reload() re-reads the file (shoald calls it on SIGHUP), so keys rotate without a restart.
//
// Authentication is on when any key source is configured: a configured file that holds no key
// refuses every request rather than opening the server. Keys are compared by their SHA-256
// digests with CRYPTO_memcmp, against every key without an early exit, so neither a key's
// bytes nor its length can be learned from response times.
//
// Thread-safety: thread-safe; Accepts() runs concurrently with Reload().
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace shoal::server {

// The keys of a key file's text: one per line, '#' comments and blank lines skipped.
std::vector<std::string> ParseApiKeys(absl::string_view text);

class ApiKeys {
 public:
  // Reads `file` when it is not empty; INVALID_ARGUMENT naming server.api_key_file when it
  // cannot be read.
  static absl::StatusOr<std::unique_ptr<ApiKeys>> Create(std::string static_key, std::string file);

  // Re-reads the key file: the number of keys now accepted. On an error the old keys stay.
  absl::StatusOr<size_t> Reload();

  // False: every request is accepted (no key configured).
  bool enabled() const { return enabled_; }
  // True when `key` (without "Bearer ") is one of the keys.
  bool Accepts(absl::string_view key) const;
  // True when `header` is "Bearer <one of the keys>".
  bool AcceptsAuthorization(absl::string_view header) const;

 private:
  using Digest = std::array<unsigned char, 32>;
  ApiKeys(std::string static_key, std::string file);
  static Digest Hash(absl::string_view key);

  const std::string file_;
  const bool enabled_;
  std::vector<Digest> static_digest_;  // server.api_key's, if set
  mutable absl::Mutex mu_;
  std::vector<Digest> file_digests_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shoal::server
