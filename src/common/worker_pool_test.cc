#include "common/worker_pool.h"

#include <atomic>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace gpusched {
namespace {

TEST(WorkerPoolTest, RunsEveryTaskInOrderOnOneThread) {
  std::vector<int> order;
  {
    WorkerPool pool(1, 100);
    for (int i = 0; i < 50; ++i) {
      ASSERT_TRUE(pool.TrySubmit([&order, i] { order.push_back(i); }));
    }
  }  // Stop runs what is queued, then joins
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[i], i);
}

TEST(WorkerPoolTest, RefusesBeyondTheQueueBoundAndAfterStop) {
  WorkerPool pool(1, 2);
  absl::Notification running, release;
  ASSERT_TRUE(pool.TrySubmit([&] {
    running.Notify();
    release.WaitForNotification();
  }));
  running.WaitForNotification();  // the worker holds the first task
  std::atomic<int> ran{0};
  EXPECT_TRUE(pool.TrySubmit([&] { ++ran; }));
  EXPECT_TRUE(pool.TrySubmit([&] { ++ran; }));
  EXPECT_EQ(pool.queued(), 2u);
  EXPECT_FALSE(pool.TrySubmit([&] { ran += 100; }));  // third waiting one
  release.Notify();
  pool.Stop();
  EXPECT_EQ(ran.load(), 2);
  EXPECT_FALSE(pool.TrySubmit([&] { ran += 100; }));
  EXPECT_EQ(ran.load(), 2);
}

TEST(WorkerPoolTest, ThreadsRunTasksConcurrently) {
  // Two tasks that each wait for the other finish only if two threads run
  // them at once.
  WorkerPool pool(2, 10);
  absl::Notification a, b;
  ASSERT_TRUE(pool.TrySubmit([&] {
    a.Notify();
    b.WaitForNotification();
  }));
  ASSERT_TRUE(pool.TrySubmit([&] {
    b.Notify();
    a.WaitForNotification();
  }));
  pool.Stop();
  EXPECT_TRUE(a.HasBeenNotified() && b.HasBeenNotified());
}

}  // namespace
}  // namespace gpusched
