// WorkerPool: a fixed set of owned threads that run submitted tasks in
// order of submission, with a bound on the tasks waiting.
//
// For work that must not run on an I/O thread because it may block (the
// control API and /metrics wait for the controller's lock, and a
// controller pass may hold it for many milliseconds): the I/O thread
// submits and goes on serving the gateway. A full queue is refused at
// once (TrySubmit returns false) so that the caller can answer 503 instead
// of piling up work the pool cannot catch up with.
//
// TrySubmit and queued are thread-safe. Stop() (the owner's; also run by
// the destructor) stops taking tasks, lets the threads run the ones already
// queued, and joins them.
#ifndef GPUSCHED_COMMON_WORKER_POOL_H_
#define GPUSCHED_COMMON_WORKER_POOL_H_

#include <cstddef>
#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace gpusched {

class WorkerPool {
 public:
  // threads >= 1; max_queued >= 1 (tasks waiting, not counting the ones
  // running).
  WorkerPool(int threads, size_t max_queued);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // False (and `task` is dropped unrun) when max_queued tasks are waiting
  // or the pool is stopped.
  bool TrySubmit(absl::AnyInvocable<void() &&> task);
  void Stop();

  size_t queued();
  size_t max_queued() const { return max_queued_; }

 private:
  void Run();
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_queued_;
  mutable absl::Mutex mu_;
  std::deque<absl::AnyInvocable<void() &&>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace gpusched

#endif  // GPUSCHED_COMMON_WORKER_POOL_H_
