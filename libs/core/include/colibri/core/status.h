// Status helpers used across colibri. Errors travel as absl::Status / absl::StatusOr<T>; these
// macros keep the early-return boilerplate short. Codes have fixed meanings (see STYLE.md):
// NotFound, InvalidArgument, FailedPrecondition (format/shape), DataLoss (checksum),
// Unavailable (retryable), ResourceExhausted, DeadlineExceeded, Cancelled, Internal (a bug).
#pragma once

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

#define COLIBRI_STATUS_CONCAT_INNER(a, b) a##b
#define COLIBRI_STATUS_CONCAT(a, b) COLIBRI_STATUS_CONCAT_INNER(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    ::absl::Status colibri_status_ = (expr);           \
    if (!colibri_status_.ok()) return colibri_status_; \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, Foo());` declares/assigns x from an absl::StatusOr or returns its error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  COLIBRI_ASSIGN_OR_RETURN_IMPL(COLIBRI_STATUS_CONCAT(colibri_statusor_, __LINE__), lhs, expr)
#define COLIBRI_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()

namespace colibri {

// Returns `status` with `context + ": "` prepended to its message (same code). OK stays OK.
inline absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

}  // namespace colibri
