// What etcd answers the etcd store (store/etcd_copy.cc): a kv/range answer
// and watch responses, as the JSON gateway sends them (base64 keys and
// values, int64s as strings), whatever they hold. The input is lines: the
// first a range answer, the others watch results. Properties: nothing
// throws or crashes; the copy's event index is exactly its events/ keys
// that parse (ids = create revisions); every document, key and event the
// copy holds reads back without a crash. A range answer may name a key
// twice, and keys may share a create revision.
#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "fuzz/fuzz_input.h"
#include "store/etcd_store_internal.h"
#include "store/store_internal.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace st = gpusched::store;
  using nlohmann::json;
  const std::string prefix = "/gpusched/";
  std::vector<std::string> lines =
      absl::StrSplit(gpusched::fuzz::AsText(data, size), '\n');
  st::EtcdCopy copy;
  for (size_t i = 0; i < lines.size(); ++i) {
    const json j = json::parse(lines[i], nullptr, /*allow_exceptions=*/false);
    if (i == 0) {
      copy = st::CopyFromRange(prefix, j);
    } else if (j.is_object() && j.contains("events")) {
      (void)st::ApplyWatchEvents(prefix, j["events"], &copy);
    } else {
      (void)st::ApplyWatchEvents(prefix, j, &copy);
    }
  }
  // The index holds one event per create revision of the events/ keys
  // that parse, and only those.
  std::map<int64_t, std::set<std::string>> parsed;
  for (const auto& [key, kv] : copy.kvs) {
    gpusched::fuzz::Require(kv.key == key, "a key stored under another name");
    if (absl::StartsWith(key, "events/")) {
      if (st::ParseEvent(kv).has_value()) {
        parsed[kv.create_revision].insert(key);
        gpusched::fuzz::Require(copy.events.contains(kv.create_revision),
                                "an event key missing from the index");
      }
    } else if (absl::StartsWith(key, "keys/")) {
      (void)st::ParseKey(key.substr(5), kv);
    } else {
      (void)st::ParseDoc(key, kv);
    }
  }
  gpusched::fuzz::Require(copy.events.size() == parsed.size(),
                          "the event index holds an event no key has");
  gpusched::fuzz::Require(copy.event_keys == parsed,
                          "the index's keys are not the keys that parse");
  st::EventFilter f;
  f.kinds = {"a"};
  for (const auto& [id, e] : copy.events) (void)st::EventMatches(e, f);
  return 0;
}
