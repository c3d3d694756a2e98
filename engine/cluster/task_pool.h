// TaskPool: a fixed set of threads running queued tasks in order of arrival (remote piece
// fetches, chunk placement). Long-lived threads matter here: a thread that touches the engine
// gets its own io_uring with registered buffers (engine/io_ring.h), which a thread made per
// task would set up and tear down every time. Tasks must not throw. Stop (or the destructor)
// runs what is queued, then joins; a task posted after Stop runs on the caller's thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace kvfs::cluster {

class TaskPool {
 public:
  explicit TaskPool(size_t threads) {
    for (size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
  }
  ~TaskPool() { Stop(); }
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  void Post(std::function<void()> task) {
    {
      std::lock_guard lock(mu_);
      if (!stop_) {
        tasks_.push_back(std::move(task));
        cv_.notify_one();
        return;
      }
    }
    task();
  }

  // Post with a future for the task's result.
  template <class F>
  std::future<std::invoke_result_t<F>> Async(F f) {
    auto task = std::make_shared<std::packaged_task<std::invoke_result_t<F>()>>(std::move(f));
    std::future<std::invoke_result_t<F>> result = task->get_future();
    Post([task] { (*task)(); });
    return result;
  }

  void Stop() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

 private:
  void Run() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace kvfs::cluster
