#include "server/leak_watchdog.h"

#include <utility>

#include "core/error.h"
#include "core/memory_summary.h"
#include "server/logging.h"

namespace voxd::server {

LeakWatchdog::LeakWatchdog(std::function<IdleMemoryReading()> read, MetricsRegistry& metrics,
                           int consecutive)
    : read_(std::move(read)),
      consecutive_(consecutive),
      leak_bytes_(metrics.gauge("voxd_memory_leak_bytes",
                                "Bytes allocated while idle beyond weights and persistent "
                                "buffers, in several checks in a row (0: none).")),
      findings_(metrics.counter("voxd_memory_leaks_detected_total",
                                "Times the leak watchdog found memory allocated while idle.")) {
  VOXD_CHECK(consecutive_ >= 1, "LeakWatchdog needs at least one reading per finding");
}

bool LeakWatchdog::check() {
  const IdleMemoryReading reading = read_();
  std::lock_guard lock(mutex_);
  if (!reading.idle) {
    run_ = 0;
    return false;
  }
  if (reading.unexplained_bytes == 0) {
    run_ = 0;
    reported_ = 0;
    leak_bytes_.set(0);
    return false;
  }
  if (++run_ < consecutive_) return false;
  leak_bytes_.set(static_cast<double>(reading.unexplained_bytes));
  if (reading.unexplained_bytes == reported_) return false;
  reported_ = reading.unexplained_bytes;
  findings_.inc();
  log_event(spdlog::level::warn, "memory allocated while idle (possible leak)",
            {{"unexplained_bytes", reading.unexplained_bytes},
             {"unexplained", format_bytes(reading.unexplained_bytes)},
             {"checks", run_},
             {"summary", reading.summary}});
  return true;
}

uint64_t LeakWatchdog::reported_bytes() const {
  std::lock_guard lock(mutex_);
  return reported_;
}

}  // namespace voxd::server
