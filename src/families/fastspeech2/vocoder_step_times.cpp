#include "families/fastspeech2/vocoder_step_times.h"

#include <iterator>

namespace voxd::fastspeech2 {

int VocoderStepTimes::bucket_of(int64_t rows) {
  int bucket = 0;
  while ((int64_t{1} << bucket) < rows) ++bucket;
  return bucket;
}

void VocoderStepTimes::record(int64_t rows, int64_t frames, double seconds) {
  if (rows <= 0 || frames <= 0 || !(seconds >= 0.0)) return;
  const double sample = seconds / static_cast<double>(rows * frames);
  const auto [it, first] = seconds_per_row_frame_.try_emplace(bucket_of(rows), sample);
  if (!first) it->second = 0.9 * it->second + 0.1 * sample;
}

double VocoderStepTimes::expected(int64_t rows, int64_t frames) const {
  if (seconds_per_row_frame_.empty() || rows <= 0 || frames <= 0) return 0.0;
  const int bucket = bucket_of(rows);
  auto nearest = seconds_per_row_frame_.lower_bound(bucket);
  if (nearest == seconds_per_row_frame_.end() ||
      (nearest->first != bucket && nearest != seconds_per_row_frame_.begin() &&
       bucket - std::prev(nearest)->first <= nearest->first - bucket)) {
    nearest = std::prev(nearest);
  }
  return nearest->second * static_cast<double>(rows * frames);
}

}  // namespace voxd::fastspeech2
