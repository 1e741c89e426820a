// The plug-in point of the scheduler: a StepKind is one kind of model step of one family (a
// FastSpeech2 forward over sentences, a HiFiGAN forward over mel chunks, an autoregressive
// decoder step over one token per stream). Families make their kinds (scheduler/family.h). Each
// iteration of the device thread asks every kind for the batch it would run next from the
// streams of its family (propose), picks the most urgent one, shrinks it until its planned memory
// fits the budget (footprint), and runs it (run). A kind keeps its per-stream state in the
// streams' StreamWork and its plans cached by shape; the scheduler does admission, priorities,
// delivery of audio and failure handling for all kinds alike (docs/scheduler.md).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "backends/runtime.h"
#include "scheduler/memory_budget.h"
#include "scheduler/stream.h"

namespace voxd::scheduler {

struct VoiceEntry;

// What a stream's work is for, in logs and metrics; the order of work is by slack (Batch).
enum class Urgency {
  kStarving = 0,    // a playing stream is less than Pacing::starving_below_s ahead of playback
  kFirstAudio = 1,  // a stream has not played yet (time to first audio)
  kAhead = 2,       // the stream is ahead of real-time playback: filling its buffer
};

// "starving", "first_audio", "ahead": for logs.
inline const char* urgency_name(Urgency urgency) {
  switch (urgency) {
    case Urgency::kStarving:
      return "starving";
    case Urgency::kFirstAudio:
      return "first_audio";
    case Urgency::kAhead:
      return "ahead";
  }
  return "?";
}

// What the scheduler's policy gives the kinds to order work and apply back-pressure.
struct Pacing {
  int64_t max_batch = 16;
  // A new stream's first audio is due this long after admission (its deadline among the playing
  // streams' next audio).
  double first_audio_due_s = 0.2;
  // A playing stream less than this far ahead of real-time playback is labelled starving.
  double starving_below_s = 1.0;
};

// The label of `stream`'s work now.
inline Urgency urgency_of(const Stream& stream, const Pacing& pacing, Clock::time_point now) {
  if (!stream.first_audio) return Urgency::kFirstAudio;
  return stream.seconds_ahead(now) < pacing.starving_below_s ? Urgency::kStarving : Urgency::kAhead;
}

// Work a StepKind proposes: units of work of one voice and one shape, least slack first. A unit
// is one stream's next piece of this kind's work (a sentence, a chunk, a token); a stream may
// have several consecutive units in a batch, in its own order, and keeping any prefix of `items`
// must be a valid smaller batch.
struct Batch {
  Urgency urgency = Urgency::kAhead;  // of the first item
  // Of the first item: seconds until its stream keeps a listener waiting (Stream::slack, plus the
  // audio already on its way for kinds that feed another). The batch with the least runs.
  double slack_s = 0.0;
  VoiceEntry* voice = nullptr;
  std::vector<std::shared_ptr<Stream>> items;
  // Streams of the voice outside `items` whose memory the step may take back (preempt) when it
  // runs short, in the order to take it; for kinds that preempt. Items the scheduler cuts off
  // for memory come first.
  std::vector<std::shared_ptr<Stream>> preemptible;
  // For kinds over a pool of pages: the pages the step leaves free beside its own (room for
  // streams outside it to grow), taking preemptible streams' pages back rather than using them.
  int64_t pages_to_leave = 0;
};

// The batch a candidate (a struct with a `stream` and its `slack`) leads: its urgency, slack and
// voice, no items yet.
template <typename Candidate>
Batch batch_led_by(const Candidate& lead, const Pacing& pacing, Clock::time_point now) {
  Batch batch;
  batch.urgency = urgency_of(*lead.stream, pacing, now);
  batch.slack_s = lead.slack;
  batch.voice = lead.stream->voice;
  return batch;
}

// Orders a kind's candidates least slack first, the earlier admitted first at equal slack, and
// starts the batch the first leads (batch_led_by). An empty Batch (no voice) when there are none.
template <typename Candidate>
Batch lead_by_slack(std::vector<Candidate>& candidates, const Pacing& pacing,
                    Clock::time_point now) {
  if (candidates.empty()) return {};
  std::stable_sort(candidates.begin(), candidates.end(), [](const auto& a, const auto& b) {
    if (a.slack != b.slack) return a.slack < b.slack;
    return a.stream->admitted < b.stream->admitted;
  });
  return batch_led_by(candidates.front(), pacing, now);
}

// What a step made: audio per item (empty vectors for kinds that make none, or for an item that
// must wait and will be proposed again), the items that failed on their own (the rest of the
// batch carries on), and how many streams it preempted (gave their memory back to be
// recomputed later, which their kind does on its own).
struct StepOutput {
  std::vector<std::vector<float>> audio;
  std::vector<std::exception_ptr> errors;
  int64_t preempted = 0;
};

// A StepRefusal as an exception: what a step puts in StepOutput::errors for an item that does
// not fit (the scheduler answers the request as the refusal says).
class StepRefusalError : public std::exception {
 public:
  explicit StepRefusalError(StepRefusal refusal) : refusal_(std::move(refusal)) {}
  const char* what() const noexcept override { return refusal_.message.c_str(); }
  const StepRefusal& refusal() const { return refusal_; }

 private:
  StepRefusal refusal_;
};

// A step whose device work is still queued when StepKind::start returns: finish() waits for it
// and returns what the step made (or throws, failing every item, as run() would). The scheduler
// calls finish() once, on the device thread, before any other step of the same lane starts, and
// before it frees memory that steps only use for speed or unloads a voice.
class StepInFlight {
 public:
  virtual ~StepInFlight() = default;
  virtual StepOutput finish() = 0;
};

class StepKind {
 public:
  virtual ~StepKind() = default;
  // "acoustic", "vocoder": the label of this kind's metrics.
  virtual const char* name() const = 0;
  // The runtime's lane (DeviceRuntime::lanes) this kind's steps queue their device work on.
  // While a step is in flight (start) only steps of other lanes run beside it, so a kind on a
  // lane of its own can fill the host's time while another kind's step is on the device.
  virtual size_t lane() const { return 0; }
  // Device thread, under the scheduler's lock: the batch this kind would run next from
  // `streams` (the streams of this kind's family), at most pacing.max_batch items; empty when
  // none wants this kind of work.
  // May stage work within a stream's device-thread fields but consumes nothing.
  virtual Batch propose(const std::vector<std::shared_ptr<Stream>>& streams, const Pacing& pacing,
                        Clock::time_point now) = 0;
  // Device thread: bytes the step for the first `size` items of `batch` takes from the
  // allocator (MemoryBudget::footprint of its plan; plans are cached by shape). The voice is
  // loaded.
  virtual uint64_t footprint(const Batch& batch, size_t size) = 0;
  // Why a batch of one whose footprint is more than the `available` bytes cannot run.
  virtual StepRefusal too_big(const Batch& batch, uint64_t footprint, uint64_t available) const = 0;
  // Device thread: the step of `batch`'s first item alone does not fit; makes that item's next
  // step smaller (less of its work, the rest in later steps), so that footprint() asks for less.
  // False (the default) when the kind cannot, and the item is refused (too_big).
  virtual bool shrink(Batch& /*batch*/) { return false; }
  // Device thread, without the lock: runs `batch` in planned arenas, advancing the streams'
  // device-thread state. Throwing fails every request in the batch.
  virtual StepOutput run(const Batch& batch, MemoryBudget& budget) = 0;
  // Device thread, without the lock: run() that may return before the step's device work is
  // done. Returns the step in flight, whose finish() gives its output; or null when the step
  // ran whole and `output` holds what it made (the default: run()). The streams' device-thread
  // state advances here, as in run(); a step in flight holds no memory that the allocator may
  // hand to another step.
  virtual std::unique_ptr<StepInFlight> start(const Batch& batch, MemoryBudget& budget,
                                              StepOutput& output) {
    output = run(batch, budget);
    return nullptr;
  }
  // Device thread, before the first request, or while idle after the step that loaded `voice`
  // (a lazy voice, or one loaded again): runs this kind's steps for `voice` once on made-up input
  // within `budget`, so that one-time costs (loading kernels, recording graphs) are not paid by a
  // client. The voice's warm_further pieces start over after it. Throwing is logged and ignored.
  virtual void warm_up(VoiceEntry& voice, const Pacing& pacing, MemoryBudget& budget) = 0;
  // Device thread, without the lock, while no step is waiting: one more piece of warm-up beyond
  // warm_up's (a larger batch or a longer input run once on made-up input within `budget`, so
  // that what its first run costs, such as a library loading a kernel, is not paid by a client).
  // Returns whether `voice` has more; the scheduler calls again after any waiting step. Throwing
  // is logged and ends this kind's warm-up of `voice`.
  virtual bool warm_further(VoiceEntry& /*voice*/, const Pacing& /*pacing*/,
                            MemoryBudget& /*budget*/) {
    return false;
  }
};

}  // namespace voxd::scheduler
