#include "server/periodic_task.h"

#include <spdlog/spdlog.h>

#include <exception>
#include <utility>

namespace voxd::server {

PeriodicTask::PeriodicTask(std::string name, std::chrono::steady_clock::duration interval,
                           std::function<void()> task)
    : name_(std::move(name)), interval_(interval), task_(std::move(task)) {
  thread_ = std::thread([this] { loop(); });
}

PeriodicTask::~PeriodicTask() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  stop_requested_.notify_all();
  thread_.join();
}

void PeriodicTask::loop() {
  std::unique_lock lock(mutex_);
  while (!stop_requested_.wait_for(lock, interval_, [this] { return stopping_; })) {
    lock.unlock();
    try {
      task_();
    } catch (const std::exception& e) {
      spdlog::error("{}: {}", name_, e.what());
    }
    lock.lock();
  }
}

}  // namespace voxd::server
