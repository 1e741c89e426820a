#include "scheduler/stream.h"

namespace voxd::scheduler {

double Stream::seconds_ahead(Clock::time_point now) const {
  if (!first_audio || sample_rate <= 0) return 0.0;
  const double made = static_cast<double>(produced_samples) / static_cast<double>(sample_rate);
  const double heard = std::chrono::duration<double>(now - *first_audio).count();
  return made - heard;
}

double Stream::slack(Clock::time_point now, double first_audio_due_s) const {
  if (first_audio) return seconds_ahead(now);
  return first_audio_due_s - std::chrono::duration<double>(now - admitted).count();
}

}  // namespace voxd::scheduler
