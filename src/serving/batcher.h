// Batcher: Triton's dynamic batcher for tensor models, as a clock-driven
// policy (no threads, no timers of its own).
//
// Owned by one tensor-model Replica (live) or TensorReplicaSim (simulator);
// not thread-safe (the core runs on one strand). The owner adds requests as
// they arrive and, whenever a model instance is free, calls TakeBatch at (or
// after) NextDeadline(). Requests leave in FIFO order, each exactly once,
// either in a batch or through Remove (queue timeout, cancellation).
//
// Batch rule, checked in this order when TakeBatch(now) runs with n pending:
//   (a) n >= max_batch_size: a full batch of max_batch_size;
//   (b) preferred sizes are set and some preferred size p <= n: the largest
//       such p (Triton sends a preferred batch as soon as it can form one);
//   (c) the oldest request has waited >= max_queue_delay_microseconds:
//       min(n, max_batch_size), the largest batch possible (as Triton does);
//   otherwise nothing: wait for more requests or for the delay to run out.
// With no preferred sizes and a delay of 0, whatever is pending goes at once.
#ifndef GPUSCHED_SERVING_BATCHER_H_
#define GPUSCHED_SERVING_BATCHER_H_

#include <cstdint>
#include <deque>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "serving/request.h"

namespace gpusched::serving {

// Knobs named as in Triton's model config (dynamic_batching { ... }).
struct BatcherConfig {
  // Largest batch an instance runs; >= 1. Triton: max_batch_size.
  int max_batch_size = 1;
  // How long the oldest request may wait for a fuller batch; >= 0.
  // Triton: max_queue_delay_microseconds. Default 0 (no waiting).
  Micros max_queue_delay_microseconds = 0;
  // Batch sizes to send as soon as they can be formed: strictly ascending,
  // each in [1, max_batch_size]. Triton: preferred_batch_size. Default none.
  std::vector<int> preferred_batch_sizes;
  // Most requests the batcher queue holds; 0 = unbounded (the default).
  // Triton: default_queue_policy.max_queue_size.
  int max_queue_size = 0;
};

// InvalidArgument naming the offending knob, or OK.
absl::Status ValidateBatcherConfig(const BatcherConfig& config);

class Batcher {
 public:
  static absl::StatusOr<Batcher> Create(BatcherConfig config);

  // Queues `id`, arriving at `now` (nondecreasing across calls; ids unique
  // among pending requests). False, and nothing queued, when the queue holds
  // max_queue_size requests already.
  bool Add(RequestId id, Micros now);

  // Drops a pending request (queue timeout, cancellation). False when `id`
  // is not pending. O(pending).
  bool Remove(RequestId id);

  // When TakeBatch must next be called (if an instance is free) to honor the
  // rules above: the earliest time at which a batch can be formed from the
  // requests now pending, i.e. min(oldest arrival + max delay, the arrival
  // that made a full or preferred batch possible). A value <= now means "a
  // batch is ready now". kNever when nothing is pending.
  Micros NextDeadline() const;

  // Called when a model instance is free. Returns the next batch (FIFO
  // order) by the rules above, or an empty vector when the batcher should
  // keep waiting. Never empty when now >= NextDeadline() and n > 0.
  std::vector<RequestId> TakeBatch(Micros now);

  int pending() const { return static_cast<int>(queue_.size()); }
  bool empty() const { return queue_.empty(); }
  const BatcherConfig& config() const { return config_; }

 private:
  struct Entry {
    RequestId id;
    Micros arrival;
  };

  explicit Batcher(BatcherConfig config);
  // Size of the batch TakeBatch would form for `n` pending requests without
  // the delay rule: max_batch_size, the largest preferred size <= n, or 0.
  int ReadySize(int n) const;

  BatcherConfig config_;
  // Smallest pending count at which ReadySize() > 0.
  int min_ready_ = 1;
  std::deque<Entry> queue_;
  Micros last_arrival_ = 0;
};

}  // namespace gpusched::serving

#endif  // GPUSCHED_SERVING_BATCHER_H_
