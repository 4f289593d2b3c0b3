// A store's change callback, shared by the SQLite and etcd stores. Setting
// it (null clears it) waits for a call of the previous one to end, so that
// its owner may be destroyed once Set returns: the watch thread of an etcd
// store otherwise could still run a callback copied just before.
#ifndef GPUSCHED_STORE_CHANGE_NOTIFIER_H_
#define GPUSCHED_STORE_CHANGE_NOTIFIER_H_

#include <functional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace gpusched::store {

class ChangeNotifier {
 public:
  void Set(std::function<void()> callback) {
    absl::MutexLock l(&mu_);
    callback_ = std::move(callback);
  }
  // Calls the callback, if any. The callback must not block nor call Set.
  // Calls are serialized; a callback only notes the change and wakes its
  // owner, so they are short.
  void Notify() {
    absl::MutexLock l(&mu_);
    if (callback_) callback_();
  }

 private:
  absl::Mutex mu_;
  std::function<void()> callback_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpusched::store

#endif  // GPUSCHED_STORE_CHANGE_NOTIFIER_H_
