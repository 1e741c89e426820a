// One admitted request as the scheduler sees it: what its family's step kinds still have to do
// (StreamWork, the family's own state), and the audio made and not yet taken by the HTTP layer.
// The HTTP layer's threads and the device thread share it through the Scheduler's mutex; the
// fields marked "device thread" are touched by the device thread alone.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

namespace voxd::scheduler {

struct VoiceEntry;

using Clock = std::chrono::steady_clock;

// What a stream's work holds, for the scheduler's load, metrics and the monitor. Every family
// makes mel on its way to audio; the units are its own (sentences, tokens).
struct StreamGauges {
  int64_t mel_frames = 0;           // mel held for the vocoder now
  int64_t lookahead_frames = 0;     // the work takes a new unit only while it holds this
  int64_t largest_unit_frames = 0;  // mel frames of the largest unit made so far
  int64_t pending_units = 0;        // units (sentences, tokens) not yet started
  int64_t kv_pages = 0;             // pages of its voice's KV cache pool it holds
};

// A family's per-stream state: made by the family at admission (VoiceDefinition::prepare) and
// advanced by its step kinds. The device thread alone calls it, in this order: admit() once
// before the stream's first step, then steps, then release() once the stream has ended (done,
// failed or cancelled), so device memory a stream holds is taken and given back on the device
// thread only.
class StreamWork {
 public:
  virtual ~StreamWork() = default;
  // Takes what the stream holds for its life on the device (a KV cache); throwing fails the
  // stream. The default holds nothing.
  virtual void admit() {}
  // Whether every piece of the stream's audio has been made.
  virtual bool finished() const = 0;
  virtual StreamGauges gauges() const = 0;
  // Gives back everything the stream holds.
  virtual void release() = 0;
};

struct Stream {
  enum class State { kRunning, kDone, kFailed, kCancelled };

  // Fixed at admission.
  uint64_t id = 0;
  VoiceEntry* voice = nullptr;
  Clock::time_point admitted;
  Clock::time_point deadline;
  int64_t sample_rate = 0;
  // The family's kinds make no more audio for the stream while this much is waiting for the
  // client.
  int64_t max_buffered_samples = 0;

  // Device thread: the family's state, and whether StreamWork::admit() has run.
  std::unique_ptr<StreamWork> work;
  bool work_admitted = false;

  // Under the scheduler's mutex.
  State state = State::kRunning;
  std::exception_ptr error;              // why, when kFailed
  std::deque<std::vector<float>> audio;  // made, not yet taken by the HTTP layer
  int64_t buffered_samples = 0;          // in `audio`
  int64_t produced_samples = 0;          // ever made
  std::optional<Clock::time_point> first_audio;
  StreamGauges gauges;           // as of the last step that touched the stream
  bool finished_making = false;  // `audio` is all there will be
  // Called (under the mutex) when the stream has news for Scheduler::take: audio, its end, a
  // failure. Empty before Scheduler::watch and after Scheduler::release.
  std::function<void()> wake;

  bool running() const { return state == State::kRunning; }
  // Seconds of audio made beyond what a listener who started at the first audio has heard by
  // `now`: how far ahead of real-time playback the stream is (0 before its first audio).
  double seconds_ahead(Clock::time_point now) const;
  // Seconds until the stream keeps its listener waiting, the key of earliest-deadline-first
  // scheduling: before the first audio, until that is due (`first_audio_due_s` after admission;
  // negative once overdue); after it, seconds_ahead().
  double slack(Clock::time_point now, double first_audio_due_s) const;
};

}  // namespace voxd::scheduler
