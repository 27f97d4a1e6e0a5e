// Status helpers shared by every module: absl::Status / absl::StatusOr<T> cross module
// boundaries; these macros keep early returns short.
#pragma once

#include <exception>
#include <new>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

#define SHOAL_CONCAT_INNER(a, b) a##b
#define SHOAL_CONCAT(a, b) SHOAL_CONCAT_INNER(a, b)

// Evaluates `expr` (an absl::Status) and returns it from the caller when not OK.
#define SHOAL_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::absl::Status _shoal_status = (expr);         \
    if (!_shoal_status.ok()) return _shoal_status; \
  } while (0)

// `lhs = value of expr` where expr is an absl::StatusOr<T>; returns its status when not OK.
#define SHOAL_ASSIGN_OR_RETURN(lhs, expr) \
  SHOAL_ASSIGN_OR_RETURN_IMPL(SHOAL_CONCAT(_shoal_statusor_, __LINE__), lhs, expr)
#define SHOAL_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return std::move(tmp).status();    \
  lhs = std::move(tmp).value()

namespace shoal {

// Runs `fn` (returning absl::Status or absl::StatusOr<T>) and turns what it throws into its
// status, naming `step`: allocation can fail anywhere, and FAISS/BLAS report errors by
// throwing. This is how exceptions stop at a module's edge.
template <typename Fn>
auto CatchExceptions(absl::string_view step, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(step, ": out of memory"));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(step, " failed: ", e.what()));
  } catch (...) {
    return absl::InternalError(absl::StrCat(step, " failed with a non-standard exception"));
  }
}

}  // namespace shoal
