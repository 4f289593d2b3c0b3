// The control API's request targets: path and query (ParseControlTarget),
// route matching and the typed queries of the events and logs endpoints.
#include <cstdint>
#include <string>

#include "api/control_query.h"
#include "fuzz/fuzz_input.h"

using gpusched::fuzz::Require;
namespace api = gpusched::api;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string target = std::string(api::kControlPrefix) +
                             std::string(gpusched::fuzz::AsText(data, size));
  auto t = api::ParseControlTarget(target);
  if (!t.ok()) return 0;
  Require(t->parts.size() <= api::kMaxPathSegments, "too many segments");
  Require(t->query.size() <= api::kMaxQueryParams, "too many parameters");
  for (const std::string& p : t->parts) {
    Require(!p.empty() && p.find('/') == std::string::npos,
            "an empty segment or one with '/'");
  }
  (void)api::MatchesRoute("deployments/{}/logs", t->parts);
  auto events = api::ParseEventQuery(*t);
  if (events.ok()) {
    Require(events->limit >= 1 && events->limit <= api::kMaxEventsPerQuery,
            "an event limit out of bounds");
    Require(events->kinds.size() <= api::kMaxEventKinds, "too many kinds");
  }
  auto logs = api::ParseLogsQuery(*t);
  if (logs.ok()) {
    Require(logs->tail >= 1 && logs->tail <= api::kMaxLogLines,
            "a log tail out of bounds");
  }
  return 0;
}
