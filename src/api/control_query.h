// The target of a control API request (path and query string), parsed and
// bounded before any handler sees it: path segments under /api/v1 and
// query parameters, percent-decoded, and the typed queries of the events
// and logs endpoints. Pure functions (fuzzed by fuzz/control_query_fuzz.cc).
#ifndef GPUSCHED_API_CONTROL_QUERY_H_
#define GPUSCHED_API_CONTROL_QUERY_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "store/store.h"

namespace gpusched::api {

inline constexpr absl::string_view kControlPrefix = "/api/v1";
// Bounds on a control request's target (docs/control-api.md).
inline constexpr size_t kMaxTargetBytes = 8192;
inline constexpr size_t kMaxPathSegments = 8;
inline constexpr size_t kMaxQueryParams = 32;
// GET /api/v1/events: at most this many events per answer (page with
// `since`), and at most this many `kind` filters.
inline constexpr int64_t kMaxEventsPerQuery = 1000;
inline constexpr size_t kMaxEventKinds = 16;
// GET .../logs: at most this many lines (the file's last MiB in any case).
inline constexpr int kMaxLogLines = 10000;

struct ControlTarget {
  std::string path;                // as sent, without the query
  std::vector<std::string> parts;  // decoded segments under /api/v1
  std::vector<std::pair<std::string, std::string>> query;  // decoded, in order

  // The first value of `key`, "" when absent.
  std::string Get(absl::string_view key) const;
  // Every value of `key`, in order.
  std::vector<std::string> GetAll(absl::string_view key) const;
};

// Whether `path` (without the query) is under /api/v1.
bool IsControlPath(absl::string_view path);

// Parses a target under /api/v1. InvalidArgument naming what is wrong: a
// target over kMaxTargetBytes, a bad %-escape (with its position), more
// than kMaxPathSegments segments or kMaxQueryParams parameters, or a
// segment that decodes to one with '/' or a control character.
absl::StatusOr<ControlTarget> ParseControlTarget(absl::string_view target);

// Whether the segments match `pattern` ("deployments/{}/logs": "{}" is any
// one segment).
bool MatchesRoute(absl::string_view pattern,
                  const std::vector<std::string>& parts);

// ?deployment=&tenant=&kind=...&since=&limit= (limit 1..kMaxEventsPerQuery,
// default 100). InvalidArgument naming the parameter and its bound.
absl::StatusOr<store::EventFilter> ParseEventQuery(const ControlTarget& t);

// ?replica=&stream=stdout|stderr&tail=1..kMaxLogLines (default stderr, 100).
struct LogsQuery {
  std::string replica;  // "" = the first replica
  std::string stream = "stderr";
  int tail = 100;
};
absl::StatusOr<LogsQuery> ParseLogsQuery(const ControlTarget& t);

}  // namespace gpusched::api

#endif  // GPUSCHED_API_CONTROL_QUERY_H_
