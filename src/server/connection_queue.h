// cpp-httplib's task queue, bounded: `workers` threads serve connections and at most
// `max_waiting` more wait for one. A connection beyond that goes to one extra thread that
// answers its requests 503 (the HTTP handlers check rejecting()), so an overloaded server says
// so at once instead of leaving clients hanging in an ever longer queue.
#pragma once

#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace voxd::server {

// Counts kept for /metrics; they outlive the queue, which cpp-httplib owns.
struct ConnectionCounts {
  std::atomic<size_t> active{0};   // being served by a worker
  std::atomic<size_t> waiting{0};  // accepted, waiting for a worker
  std::atomic<uint64_t> rejected{0};
};

class ConnectionQueue final : public httplib::TaskQueue {
 public:
  // Starts the threads; `counts` must outlive the queue.
  ConnectionQueue(size_t workers, size_t max_waiting, ConnectionCounts& counts);
  ~ConnectionQueue() override;
  ConnectionQueue(const ConnectionQueue&) = delete;
  ConnectionQueue& operator=(const ConnectionQueue&) = delete;

  // Queues one connection's work (cpp-httplib calls this from its accept loop).
  void enqueue(std::function<void()> task) override;
  // Runs what is queued, then joins the threads.
  void shutdown() override;

  // True on the thread that answers connections over the limit.
  static bool rejecting();

 private:
  void work();
  void reject();

  const size_t workers_;
  const size_t max_waiting_;
  ConnectionCounts& counts_;
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable reject_ready_;
  std::deque<std::function<void()>> tasks_;
  std::deque<std::function<void()>> over_limit_;
  size_t busy_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace voxd::server
