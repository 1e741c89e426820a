// How long a voice's vocoder steps take lately, so that VocoderKind can size a step to the audio
// its streams hold. A step's time is not proportional to its chunks on a GPU (a recorded batch is
// padded to a power of two, and small batches are mostly fixed cost), so the served steps are
// averaged by the rows they ran, in power-of-two buckets: seconds per row and mel frame, a moving
// average each. One thread at a time (the device thread).
#pragma once

#include <cstdint>
#include <map>

namespace voxd::fastspeech2 {

class VocoderStepTimes {
 public:
  // A served step of `rows` rows (chunks, or a recorded batch's padded rows) of `frames` mel
  // frames each took `seconds`.
  void record(int64_t rows, int64_t frames, double seconds);
  // The seconds a step of `rows` rows of `frames` frames is expected to take: by the average of
  // its bucket, else of the nearest bucket measured (the smaller on a tie); 0 before any step.
  double expected(int64_t rows, int64_t frames) const;

 private:
  // ceil(log2(rows)).
  static int bucket_of(int64_t rows);

  std::map<int, double> seconds_per_row_frame_;  // by bucket_of(rows)
};

}  // namespace voxd::fastspeech2
