// Manifests (YAML, as `gpusched apply` and POST /api/v1/apply take them):
// ParseManifests, and for what it accepts the store's round trip, which
// must give back the same manifest (ToJson -> ManifestFromJson -> ToJson).
#include <cstdint>
#include <string>

#include "config/manifest.h"
#include "fuzz/fuzz_input.h"

using gpusched::fuzz::Require;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parsed = gpusched::config::ParseManifests(
      gpusched::fuzz::AsText(data, size), "fuzz.yaml");
  if (!parsed.ok()) {
    Require(!parsed.status().message().empty(), "a refusal without a message");
    return 0;
  }
  Require(parsed->size() <= gpusched::config::kMaxManifests,
          "more manifests than the bound");
  for (const gpusched::config::Manifest& m : *parsed) {
    const nlohmann::json j = gpusched::config::ToJson(m);
    auto back = gpusched::config::ManifestFromJson(j, "store");
    Require(back.ok(), "the stored form of an accepted manifest is refused");
    Require(gpusched::config::ToJson(*back) == j,
            "the stored form does not round-trip");
  }
  return 0;
}
