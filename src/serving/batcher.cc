#include "serving/batcher.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace gpusched::serving {

absl::Status ValidateBatcherConfig(const BatcherConfig& config) {
  if (config.max_batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_batch_size must be >= 1, got ", config.max_batch_size));
  }
  if (config.max_queue_delay_microseconds < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_queue_delay_microseconds must be >= 0, got ",
                     config.max_queue_delay_microseconds));
  }
  int previous = 0;
  for (int size : config.preferred_batch_sizes) {
    if (size < 1 || size > config.max_batch_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "preferred_batch_size ", size,
          " must be in [1, max_batch_size=", config.max_batch_size, "]"));
    }
    if (size <= previous) {
      return absl::InvalidArgumentError(
          absl::StrCat("preferred_batch_size must be strictly ascending, got ",
                       size, " after ", previous));
    }
    previous = size;
  }
  if (config.max_queue_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_queue_size must be >= 0 (0 = unbounded), got ",
                     config.max_queue_size));
  }
  return absl::OkStatus();
}

absl::StatusOr<Batcher> Batcher::Create(BatcherConfig config) {
  if (absl::Status s = ValidateBatcherConfig(config); !s.ok()) return s;
  return Batcher(std::move(config));
}

Batcher::Batcher(BatcherConfig config) : config_(std::move(config)) {
  min_ready_ = config_.max_batch_size;
  if (!config_.preferred_batch_sizes.empty()) {
    min_ready_ = std::min(min_ready_, config_.preferred_batch_sizes.front());
  }
}

int Batcher::ReadySize(int n) const {
  if (n >= config_.max_batch_size) return config_.max_batch_size;
  const std::vector<int>& preferred = config_.preferred_batch_sizes;
  // The largest preferred size <= n.
  auto it = std::upper_bound(preferred.begin(), preferred.end(), n);
  if (it == preferred.begin()) return 0;
  return *std::prev(it);
}

bool Batcher::Add(RequestId id, Micros now) {
  if (config_.max_queue_size > 0 &&
      static_cast<int>(queue_.size()) >= config_.max_queue_size) {
    return false;
  }
  CHECK(now >= last_arrival_)
      << "Batcher::Add: time went back from " << last_arrival_ << " to " << now;
  last_arrival_ = now;
  queue_.push_back(Entry{id, now});
  return true;
}

bool Batcher::Remove(RequestId id) {
  auto it = std::find_if(queue_.begin(), queue_.end(),
                         [id](const Entry& e) { return e.id == id; });
  if (it == queue_.end()) return false;
  queue_.erase(it);
  return true;
}

Micros Batcher::NextDeadline() const {
  if (queue_.empty()) return kNever;
  const Micros delay = config_.max_queue_delay_microseconds;
  const Micros oldest = queue_.front().arrival;
  Micros deadline = oldest > kNever - delay ? kNever : oldest + delay;
  if (static_cast<int>(queue_.size()) >= min_ready_) {
    // Arrivals are nondecreasing, so the batch became possible when the
    // min_ready_-th pending request arrived.
    deadline = std::min(deadline, queue_[min_ready_ - 1].arrival);
  }
  return deadline;
}

std::vector<RequestId> Batcher::TakeBatch(Micros now) {
  std::vector<RequestId> batch;
  const int n = static_cast<int>(queue_.size());
  if (n == 0) return batch;
  int size = ReadySize(n);
  if (size == 0 &&
      now - queue_.front().arrival >= config_.max_queue_delay_microseconds) {
    size = std::min(n, config_.max_batch_size);
  }
  batch.reserve(size);
  for (int i = 0; i < size; ++i) {
    batch.push_back(queue_.front().id);
    queue_.pop_front();
  }
  return batch;
}

}  // namespace gpusched::serving
