// Status helpers shared by every module.
//
// Anything that can fail on input or environment returns absl::Status or
// absl::StatusOr<T>; these macros keep the happy path readable. Header-only,
// thread-compatible.
#ifndef GPUSCHED_COMMON_STATUS_H_
#define GPUSCHED_COMMON_STATUS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define GPUSCHED_STATUS_CONCAT_INNER(a, b) a##b
#define GPUSCHED_STATUS_CONCAT(a, b) GPUSCHED_STATUS_CONCAT_INNER(a, b)

// Returns the status from the enclosing function when `expr` is not OK.
#define RETURN_IF_ERROR(expr)                    \
  do {                                           \
    const ::absl::Status _gpusched_st = (expr);  \
    if (!_gpusched_st.ok()) return _gpusched_st; \
  } while (0)

// ASSIGN_OR_RETURN(lhs, expr): evaluates a StatusOr expression, returns its
// status on error, otherwise moves the value into `lhs` (which may declare).
#define ASSIGN_OR_RETURN(lhs, expr) \
  GPUSCHED_ASSIGN_OR_RETURN_IMPL(   \
      GPUSCHED_STATUS_CONCAT(_gpusched_or_, __LINE__), lhs, expr)
#define GPUSCHED_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return std::move(tmp).status();       \
  lhs = std::move(tmp).value()

#endif  // GPUSCHED_COMMON_STATUS_H_
