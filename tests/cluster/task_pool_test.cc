#include "task_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>

namespace kvfs::cluster {
namespace {

// Tasks run on the pool's few long-lived threads (the point of the pool: a thread that touches
// the engine sets up an io_uring once), and Async hands back each result.
TEST(TaskPool, RunsEveryTaskOnItsOwnThreads) {
  TaskPool pool(3);
  std::mutex mu;
  std::set<std::thread::id> ids;
  std::vector<std::future<int>> results;
  for (int i = 0; i < 200; ++i) {
    results.push_back(pool.Async([i, &mu, &ids] {
      std::lock_guard lock(mu);
      ids.insert(std::this_thread::get_id());
      return i * 2;
    }));
  }
  for (int i = 0; i < 200; ++i) EXPECT_EQ(results[i].get(), i * 2);
  EXPECT_LE(ids.size(), 3u);
  EXPECT_EQ(ids.count(std::this_thread::get_id()), 0u);
}

TEST(TaskPool, StopRunsWhatIsQueuedAndLaterTasksRunOnTheCaller) {
  TaskPool pool(1);
  std::atomic<int> ran{0};
  std::promise<void> gate;
  std::shared_future<void> open = gate.get_future().share();
  pool.Post([open, &ran] {
    open.wait();
    ++ran;
  });
  for (int i = 0; i < 10; ++i) pool.Post([&ran] { ++ran; });
  std::thread stopper([&pool] { pool.Stop(); });
  gate.set_value();
  stopper.join();
  EXPECT_EQ(ran.load(), 11);
  auto after = pool.Async([] { return std::this_thread::get_id(); });
  ASSERT_EQ(after.wait_for(std::chrono::seconds(0)), std::future_status::ready);
  EXPECT_EQ(after.get(), std::this_thread::get_id());
  pool.Stop();  // twice is fine
}

}  // namespace
}  // namespace kvfs::cluster
