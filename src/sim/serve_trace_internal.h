// Helpers the trace readers (serve_trace.cc) and the workload generators
// (serve_workload.cc) share. Internal to sim/.
#ifndef GPUSCHED_SIM_SERVE_TRACE_INTERNAL_H_
#define GPUSCHED_SIM_SERVE_TRACE_INTERNAL_H_

#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sim/serve_trace.h"

namespace gpusched::sim::trace_internal {

inline constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

absl::StatusOr<std::string> ReadFileToString(const std::string& path);
// "path:line: what" as InvalidArgument.
absl::Status LineError(absl::string_view path, int line,
                       absl::string_view what);
// Parses all of `s` as an integer or a finite double (std::from_chars: no
// locale).
bool ParseInt(absl::string_view s, int64_t* v);
bool ParseFinite(absl::string_view s, double* v);
// Stable sort by arrival (a no-op when sorted).
void SortByArrival(Trace& t);

}  // namespace gpusched::sim::trace_internal

#endif  // GPUSCHED_SIM_SERVE_TRACE_INTERNAL_H_
