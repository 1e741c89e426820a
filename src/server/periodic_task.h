// Runs a callable every `interval` on its own thread until destroyed (the server's leak checks
// and its release of idle cached memory). An exception from the callable is logged and the task
// goes on.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace voxd::server {

class PeriodicTask {
 public:
  // Starts the thread; the first run is one `interval` from now. `name` appears in log lines.
  PeriodicTask(std::string name, std::chrono::steady_clock::duration interval,
               std::function<void()> task);
  // Stops the thread, waiting for a run in progress to end.
  ~PeriodicTask();
  PeriodicTask(const PeriodicTask&) = delete;
  PeriodicTask& operator=(const PeriodicTask&) = delete;

 private:
  void loop();

  const std::string name_;
  const std::chrono::steady_clock::duration interval_;
  const std::function<void()> task_;
  std::mutex mutex_;
  std::condition_variable stop_requested_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace voxd::server
