// Watches for memory that stays allocated while the server is idle. Whatever a server allocates
// beyond its weights and persistent buffers belongs to requests, so with no request admitted it
// should be zero; when it is not, several checks in a row (a request finishing between the
// reading and the check is not a leak), the watchdog sets the gauge voxd_memory_leak_bytes,
// counts the finding in voxd_memory_leaks_detected_total and logs one warning with the memory
// summary. It reads memory through a callable, so tests drive it with a fake.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "server/metrics.h"

namespace voxd::server {

// One reading of the service's memory.
struct IdleMemoryReading {
  bool idle = false;               // nothing admitted: every byte should be explained
  uint64_t unexplained_bytes = 0;  // allocated beyond weights and persistent buffers
  std::string summary;             // the memory summary, for the log line
};

class LeakWatchdog {
 public:
  // `read` is called on every check; `consecutive` (at least 1) idle readings with unexplained
  // bytes make a finding. `metrics` must outlive the watchdog.
  LeakWatchdog(std::function<IdleMemoryReading()> read, MetricsRegistry& metrics,
               int consecutive = 3);

  // Takes one reading. An idle one with unexplained bytes extends the run of such readings;
  // when the run reaches `consecutive`, sets the gauge, and unless the same amount was reported
  // already, counts a finding and logs a warning. An idle reading with none clears the gauge
  // and what was reported; a busy one ends the run. Returns whether this check reported a leak.
  bool check();

  // The unexplained bytes last reported (0: none since the last clean idle reading).
  uint64_t reported_bytes() const;

 private:
  std::function<IdleMemoryReading()> read_;
  const int consecutive_;
  Gauge& leak_bytes_;
  Counter& findings_;
  mutable std::mutex mutex_;
  int run_ = 0;
  uint64_t reported_ = 0;
};

}  // namespace voxd::server
