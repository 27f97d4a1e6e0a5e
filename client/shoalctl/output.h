// shoalctl's output: tables for people, JSON (--output json) for scripts, and the exit codes
// a script can branch on. Every read command prints through here, so the two formats stay in
// step.
//
// Thread-safety: none; the one thread of shoalctl prints.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/client.h"

namespace shoal::ctl {

enum class Format { kTable, kJson };

// Exit codes (documented in --help and docs/shoalctl.md): 0 ok, 1 usage, 2+ by status class.
inline constexpr int kExitOk = 0;
inline constexpr int kExitUsage = 1;        // bad flags or arguments, unreadable input file
inline constexpr int kExitNotFound = 2;     // NOT_FOUND; `health` of an unknown collection
inline constexpr int kExitConflict = 3;     // ALREADY_EXISTS, FAILED_PRECONDITION, ABORTED
inline constexpr int kExitRejected = 4;     // INVALID_ARGUMENT, OUT_OF_RANGE
inline constexpr int kExitUnavailable = 5;  // UNAVAILABLE, DEADLINE_EXCEEDED,
                                            // RESOURCE_EXHAUSTED, CANCELLED; `health` NOT_SERVING
inline constexpr int kExitPermission = 6;   // UNAUTHENTICATED, PERMISSION_DENIED
inline constexpr int kExitServerError = 7;  // INTERNAL, DATA_LOSS, UNKNOWN, UNIMPLEMENTED
extern const char kExitCodesHelp[];

// The exit code of a failed call, by its status code's class.
int ExitCodeFor(const absl::Status& status);

// Prints "shoalctl: CODE: message" to stderr; returns ExitCodeFor(status).
int Fail(const absl::Status& status);
// The same for an error in what the user gave (flags, input files): exits kExitUsage.
int UsageError(const absl::Status& status);

std::string JsonString(const std::string& s);

void PrintCollections(Format format, const std::vector<CollectionInfo>& collections);
void PrintCollection(Format format, const CollectionInfo& info);
void PrintSearchResults(Format format, const std::vector<SearchResult>& results, size_t first_query,
                        bool stats);
void PrintPoints(Format format, const std::vector<Point>& points, bool vectors);
void PrintHealth(Format format, const std::string& status);
// A write command's outcome: the sentence as a table, {"ok": true, "message": ...} as JSON.
void PrintMessage(Format format, const std::string& message);
void PrintCount(Format format, uint64_t count);

}  // namespace shoal::ctl
