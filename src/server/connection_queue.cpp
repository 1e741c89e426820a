#include "server/connection_queue.h"

#include <utility>

namespace voxd::server {
namespace {

thread_local bool t_rejecting = false;

}  // namespace

ConnectionQueue::ConnectionQueue(size_t workers, size_t max_waiting, ConnectionCounts& counts)
    : workers_(workers > 0 ? workers : 1), max_waiting_(max_waiting), counts_(counts) {
  for (size_t i = 0; i < workers_; ++i) threads_.emplace_back([this] { work(); });
  threads_.emplace_back([this] { reject(); });
}

ConnectionQueue::~ConnectionQueue() {
  shutdown();
}

void ConnectionQueue::enqueue(std::function<void()> task) {
  {
    std::lock_guard lock(mutex_);
    if (busy_ + tasks_.size() < workers_ + max_waiting_) {
      tasks_.push_back(std::move(task));
      counts_.waiting.store(tasks_.size());
      work_ready_.notify_one();
      return;
    }
    over_limit_.push_back(std::move(task));
  }
  counts_.rejected.fetch_add(1);
  reject_ready_.notify_one();
}

void ConnectionQueue::shutdown() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  work_ready_.notify_all();
  reject_ready_.notify_all();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

bool ConnectionQueue::rejecting() {
  return t_rejecting;
}

void ConnectionQueue::work() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
      ++busy_;
      counts_.waiting.store(tasks_.size());
      counts_.active.store(busy_);
    }
    task();
    std::lock_guard lock(mutex_);
    --busy_;
    counts_.active.store(busy_);
  }
}

void ConnectionQueue::reject() {
  t_rejecting = true;
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mutex_);
      reject_ready_.wait(lock, [this] { return stopping_ || !over_limit_.empty(); });
      if (over_limit_.empty()) return;
      task = std::move(over_limit_.front());
      over_limit_.pop_front();
    }
    task();
  }
}

}  // namespace voxd::server
