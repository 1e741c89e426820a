#include "server/resampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "core/error.h"

namespace voxd::server {
namespace {

constexpr int64_t kMaxPhases = 1024;
// Taps on each side at the lower of the two rates; with the Kaiser window below this keeps
// aliasing and ripple near -80 dB while costing 32 multiply-adds per output sample.
constexpr int64_t kHalfTaps = 16;
constexpr double kKaiserBeta = 8.6;
// The pass band ends at this fraction of the lower rate's Nyquist frequency.
constexpr double kRolloff = 0.92;

double kaiser(double x) {  // x in [-1, 1]
  const double r = std::max(0.0, 1.0 - x * x);
  return std::cyl_bessel_i(0.0, kKaiserBeta * std::sqrt(r)) / std::cyl_bessel_i(0.0, kKaiserBeta);
}

double sinc(double x) {
  if (x == 0.0) return 1.0;
  const double px = M_PI * x;
  return std::sin(px) / px;
}

}  // namespace

Resampler::Resampler(int64_t from_rate, int64_t to_rate) {
  if (from_rate <= 0 || to_rate <= 0) {
    throw Error("cannot resample from " + std::to_string(from_rate) + " Hz to " +
                std::to_string(to_rate) + " Hz: rates must be positive");
  }
  const int64_t g = std::gcd(from_rate, to_rate);
  up_ = to_rate / g;
  down_ = from_rate / g;
  if (up_ > kMaxPhases) {
    throw Error("cannot resample from " + std::to_string(from_rate) + " Hz to " +
                std::to_string(to_rate) + " Hz: the ratio " + std::to_string(up_) + "/" +
                std::to_string(down_) + " needs more than " + std::to_string(kMaxPhases) +
                " filter phases");
  }
  // In input samples: the cut-off frequency (cycles per sample) and the filter's half width.
  const double scale = std::min(1.0, static_cast<double>(up_) / static_cast<double>(down_));
  const double cutoff = 0.5 * scale * kRolloff;
  half_ = static_cast<int64_t>(std::ceil(static_cast<double>(kHalfTaps) / scale));
  const int64_t width = 2 * half_;
  taps_.resize(static_cast<size_t>(up_ * width));
  for (int64_t phase = 0; phase < up_; ++phase) {
    // Tap j weighs input k + j - half_ + 1 for an output at input time k + phase / up_.
    float* row = &taps_[static_cast<size_t>(phase * width)];
    double sum = 0.0;
    for (int64_t j = 0; j < width; ++j) {
      const double u = static_cast<double>(phase) / static_cast<double>(up_) -
                       static_cast<double>(j - half_ + 1);
      const double h =
          2.0 * cutoff * sinc(2.0 * cutoff * u) * kaiser(u / static_cast<double>(half_));
      row[j] = static_cast<float>(h);
      sum += h;
    }
    for (int64_t j = 0; j < width; ++j) row[j] = static_cast<float>(row[j] / sum);
  }
  history_.assign(static_cast<size_t>(half_ - 1), 0.0f);
  history_start_ = -(half_ - 1);
}

void Resampler::produce(int64_t available, std::vector<float>& out) {
  const int64_t width = 2 * half_;
  for (;;) {
    const int64_t time = produced_ * down_;  // in units of 1 / up_ input samples
    const int64_t k = time / up_;
    if (k + half_ >= available) break;
    const float* row = &taps_[static_cast<size_t>((time % up_) * width)];
    const float* x = &history_[static_cast<size_t>(k - half_ + 1 - history_start_)];
    float acc = 0.0f;
    for (int64_t j = 0; j < width; ++j) acc += row[j] * x[j];
    out.push_back(acc);
    ++produced_;
  }
  // Keep what the next output needs: inputs from its first tap on.
  const int64_t first_needed = (produced_ * down_) / up_ - half_ + 1;
  const int64_t drop =
      std::clamp<int64_t>(first_needed - history_start_, 0, static_cast<int64_t>(history_.size()));
  history_.erase(history_.begin(), history_.begin() + drop);
  history_start_ += drop;
}

void Resampler::process(std::span<const float> input, std::vector<float>& out) {
  history_.insert(history_.end(), input.begin(), input.end());
  received_ += static_cast<int64_t>(input.size());
  produce(received_, out);
}

void Resampler::flush(std::vector<float>& out) {
  // Silence after the end lets every output before the input's end see all its taps.
  history_.insert(history_.end(), static_cast<size_t>(half_), 0.0f);
  produce(received_ + half_, out);
}

}  // namespace voxd::server
