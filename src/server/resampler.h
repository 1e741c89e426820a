// Changes the sample rate of a mono stream by a rational factor (a windowed-sinc polyphase
// filter), chunk by chunk, keeping only the filter's history between chunks. The output is
// aligned with the input (no delay): output sample n is the input at time n * from / to.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace voxd::server {

class Resampler {
 public:
  // Throws voxd::Error when a rate is not positive or to / from in lowest terms has a numerator
  // over 1024 (the filter keeps one set of taps per numerator step).
  Resampler(int64_t from_rate, int64_t to_rate);

  // Takes `input` and appends to `out` every output sample it now determines.
  void process(std::span<const float> input, std::vector<float>& out);
  // Appends the rest, taking the input as silent after its end; the output then holds
  // ceil(input samples * to / from) samples. Call once, after the last process().
  void flush(std::vector<float>& out);

 private:
  void produce(int64_t available, std::vector<float>& out);

  int64_t up_ = 1;           // to / gcd
  int64_t down_ = 1;         // from / gcd
  int64_t half_ = 0;         // taps on each side of an output's input time
  std::vector<float> taps_;  // up_ phases of 2 * half_ taps each
  std::vector<float> history_;
  int64_t history_start_ = 0;  // input index of history_[0]; indices below 0 are silence
  int64_t received_ = 0;
  int64_t produced_ = 0;
};

}  // namespace voxd::server
