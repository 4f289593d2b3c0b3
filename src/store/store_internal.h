// Rules every Store implementation applies the same way (store.h's
// contracts), so that they cannot drift apart.
#ifndef GPUSCHED_STORE_STORE_INTERNAL_H_
#define GPUSCHED_STORE_STORE_INTERNAL_H_

#include <string>

#include "absl/status/status.h"
#include "store/store.h"

namespace gpusched::store {

// InvalidArgument for a Put's arguments (name, generation, JSON).
absl::Status CheckPut(DocKind kind, const std::string& name,
                      const std::string& manifest_json, int64_t generation);
// FailedPrecondition when a Put of `generation` with `manifest_json` must
// not replace the stored document (store.h's Put contract).
absl::Status CheckGeneration(DocKind kind, const std::string& name,
                             int64_t stored_generation,
                             const std::string& stored_json, int64_t generation,
                             const std::string& manifest_json);
// InvalidArgument for a status document's name or size.
absl::Status CheckStatus(const std::string& name, const std::string& json);
// Whether `e` passes `f` (all but the limit and the order).
bool EventMatches(const Event& e, const EventFilter& f);

// Bounds on what a store keeps of things that grow.
inline constexpr size_t kMaxStatusBytes = 1 << 20;  // one status document

}  // namespace gpusched::store

#endif  // GPUSCHED_STORE_STORE_INTERNAL_H_
