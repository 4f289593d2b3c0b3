#include "gateway/key_cache.h"

#include <utility>

namespace gpusched::gateway {

absl::StatusOr<store::KeyInfo> KeyCache::Authenticate(std::string_view secret) {
  absl::MutexLock lock(&mu_);
  // Read the version before the lookup: a revoke that lands in between
  // moves it again, and the next call drops what this one cached.
  const int64_t version = store_->keys_version();
  if (version != version_) {
    keys_.clear();
    version_ = version;
  }
  auto it = keys_.find(absl::string_view(secret.data(), secret.size()));
  if (it != keys_.end()) return it->second;
  absl::StatusOr<store::KeyInfo> info = store_->AuthenticateKey(secret);
  if (info.ok()) {
    if (keys_.size() >= capacity_) keys_.clear();
    keys_.emplace(std::string(secret), *info);
  }
  return info;
}

size_t KeyCache::size() {
  absl::MutexLock lock(&mu_);
  return keys_.size();
}

}  // namespace gpusched::gateway
