// KeyCache: the data plane's API-key check, over the Store. A key is hashed
// and looked up in SQLite once; later requests with the same secret are
// answered from memory. The cache is dropped whenever the Store's
// keys_version() moves (a key revoked, a tenant deleted with its keys), so a
// revoked key stops working at the next request. Failed checks are never
// cached (a key created a moment ago works at once).
//
// Bounded: at most `capacity` secrets; when full the cache starts over
// (a scan of random keys cannot grow it).
//
// Thread-safety: thread-safe (one mutex; the Store has its own, taken
// inside this one: lock order cache, store). Owned by the serve command;
// the Store outlives it.
#ifndef GPUSCHED_GATEWAY_KEY_CACHE_H_
#define GPUSCHED_GATEWAY_KEY_CACHE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "store/store.h"

namespace gpusched::gateway {

class KeyCache {
 public:
  explicit KeyCache(store::Store* store, size_t capacity = 10000)
      : store_(store), capacity_(capacity) {}

  // The key's tenant and role, or Unauthenticated (the Store's message).
  absl::StatusOr<store::KeyInfo> Authenticate(std::string_view secret);

  size_t size();  // secrets cached now

 private:
  store::Store* const store_;
  const size_t capacity_;
  absl::Mutex mu_;
  int64_t version_ ABSL_GUARDED_BY(mu_) = -1;
  absl::flat_hash_map<std::string, store::KeyInfo> keys_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpusched::gateway

#endif  // GPUSCHED_GATEWAY_KEY_CACHE_H_
