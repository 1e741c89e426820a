// A progress line on standard error for long runs of `voxd synth`: rewritten in place while
// sentences are synthesized, cleared at the end, and shown only when standard error is a terminal.
#pragma once

#include <cstddef>
#include <cstdint>

namespace voxd {

class ProgressLine {
 public:
  ProgressLine();
  // Clears the line if it is still shown.
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  // Shows "sentence `done`/`total`, N.N s of audio"; nothing for texts of one sentence.
  void update(int64_t done, int64_t total, double audio_seconds);
  // Erases the line, leaving the cursor at the start of it.
  void clear();

 private:
  bool enabled_;
  size_t shown_chars_ = 0;
};

}  // namespace voxd
