#include "common/worker_pool.h"

#include <utility>

#include "common/check.h"

namespace gpusched {

WorkerPool::WorkerPool(int threads, size_t max_queued)
    : max_queued_(max_queued) {
  CHECK(threads >= 1 && max_queued >= 1);
  threads_.reserve(threads);
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
}

WorkerPool::~WorkerPool() { Stop(); }

bool WorkerPool::TrySubmit(absl::AnyInvocable<void() &&> task) {
  absl::MutexLock lock(&mu_);
  if (stopping_ || tasks_.size() >= max_queued_) return false;
  tasks_.push_back(std::move(task));
  return true;
}

void WorkerPool::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

size_t WorkerPool::queued() {
  absl::MutexLock lock(&mu_);
  return tasks_.size();
}

bool WorkerPool::HasWork() const { return stopping_ || !tasks_.empty(); }

void WorkerPool::Run() {
  while (true) {
    absl::AnyInvocable<void() &&> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &WorkerPool::HasWork));
      if (tasks_.empty()) return;  // stopping, and nothing left to run
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    std::move(task)();
  }
}

}  // namespace gpusched
