// Steps in flight: a step kind may return from start() with its device work still queued
// (StepKind::start), and the scheduler then runs a step of another lane before it finishes it,
// never one of the same lane, delivers the two in the order they started, and finishes it before it
// frees recordings a step in flight may read. A made-up family on the CPU backend whose kinds
// log what the scheduler asks of them: "queued" on lane 0 returns its steps in flight, "beside"
// on lane 1 runs whole.
#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/runtime.h"
#include "made_up_family.h"
#include "scheduler/family.h"
#include "scheduler/scheduler.h"

namespace voxd::scheduler {
namespace {

using testing::speak;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr char kType[] = "test-in-flight";

// What the kinds and the voice did, in order, across the device thread and the test.
class EventLog {
 public:
  void add(const std::string& event) {
    std::lock_guard lock(mutex_);
    events_.push_back(event);
  }
  std::vector<std::string> events() const {
    std::lock_guard lock(mutex_);
    return events_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> events_;
};

// A stream's units of work for each kind; its audio is one sample per unit, the unit's value.
class LaneWork final : public StreamWork {
 public:
  LaneWork(int queued, int beside) : queued(queued), beside(beside) {}
  bool finished() const override { return queued == 0 && beside == 0; }
  StreamGauges gauges() const override { return {}; }
  void release() override {}

  int queued;
  int beside;
  bool queued_throws = false;   // its queued steps' finish() throws
  uint64_t queued_bytes = 0;    // workspace its queued steps hold until they finish
  uint64_t beside_bytes = 0;    // workspace of its beside steps
  bool queued_records = false;  // its queued steps keep a recording (4 MiB) they replay
};

LaneWork& work_of(const Stream& stream) {
  return static_cast<LaneWork&>(*stream.work);
}

// Memory kept for speed, as recorded graphs are: freed before a step is refused for memory.
class Recording final : public LoadedVoice {
 public:
  explicit Recording(EventLog& log) : log_(log) {}
  uint64_t releasable_recording_bytes() const override {
    return recording.defined() ? recording.nbytes() : 0;
  }
  uint64_t release_recordings() override {
    const uint64_t bytes = releasable_recording_bytes();
    log_.add("release");
    recording = Tensor();
    return bytes;
  }
  Tensor recording;

 private:
  EventLog& log_;
};

// The first stream with a unit of `member` left, as a batch of one.
Batch first_with(const std::vector<std::shared_ptr<Stream>>& streams, int LaneWork::*member,
                 const Pacing& pacing, Clock::time_point now) {
  return testing::first_wanting(
      streams, pacing, now, [member](const Stream& stream) { return work_of(stream).*member > 0; });
}

// A queued step, finished by the scheduler: logs "finish queued", gives its workspace back and
// the unit's sample.
class QueuedStep final : public StepInFlight {
 public:
  QueuedStep(EventLog& log, int& in_flight, float value, bool throws, Tensor workspace)
      : log_(log),
        in_flight_(in_flight),
        value_(value),
        throws_(throws),
        workspace_(std::move(workspace)) {}
  StepOutput finish() override {
    log_.add("finish queued");
    --in_flight_;
    workspace_ = Tensor();
    if (throws_) throw std::runtime_error("the queued work failed on the device");
    return {.audio = {std::vector<float>{value_}}, .errors = {nullptr}};
  }

 private:
  EventLog& log_;
  int& in_flight_;
  float value_;
  bool throws_;
  Tensor workspace_;
};

class QueuedKind final : public StepKind {
 public:
  QueuedKind(DeviceRuntime& runtime, EventLog& log) : runtime_(runtime), log_(log) {}
  const char* name() const override { return "queued"; }
  Batch propose(const std::vector<std::shared_ptr<Stream>>& streams, const Pacing& pacing,
                Clock::time_point now) override {
    return first_with(streams, &LaneWork::queued, pacing, now);
  }
  uint64_t footprint(const Batch& batch, size_t) override {
    return MemoryBudget::footprint(work_of(*batch.items.front()).queued_bytes);
  }
  StepRefusal too_big(const Batch&, uint64_t, uint64_t) const override { return {}; }
  StepOutput run(const Batch& batch, MemoryBudget& budget) override {
    StepOutput output;
    std::unique_ptr<StepInFlight> step = start(batch, budget, output);
    return step->finish();
  }
  std::unique_ptr<StepInFlight> start(const Batch& batch, MemoryBudget&, StepOutput&) override {
    LaneWork& work = work_of(*batch.items.front());
    log_.add(in_flight_ > 0 ? "start queued while one is in flight" : "start queued");
    ++in_flight_;
    if (work.queued_records) {
      auto& recording = static_cast<Recording&>(*batch.voice->models);
      if (!recording.recording.defined()) {
        recording.recording =
            ops::empty(runtime_.persistent_context(), {static_cast<int64_t>(kMiB)}, DType::F32);
      }
    }
    Tensor workspace;
    if (work.queued_bytes > 0) {
      workspace =
          ops::empty(runtime_.context(), {static_cast<int64_t>(work.queued_bytes / 4)}, DType::F32);
    }
    return std::make_unique<QueuedStep>(log_, in_flight_, static_cast<float>(work.queued--),
                                        work.queued_throws, std::move(workspace));
  }
  void warm_up(VoiceEntry&, const Pacing&, MemoryBudget&) override {}

 private:
  DeviceRuntime& runtime_;
  EventLog& log_;
  int in_flight_ = 0;
};

class BesideKind final : public StepKind {
 public:
  BesideKind(DeviceRuntime& runtime, EventLog& log) : runtime_(runtime), log_(log) {}
  const char* name() const override { return "beside"; }
  size_t lane() const override { return 1; }
  Batch propose(const std::vector<std::shared_ptr<Stream>>& streams, const Pacing& pacing,
                Clock::time_point now) override {
    return first_with(streams, &LaneWork::beside, pacing, now);
  }
  uint64_t footprint(const Batch& batch, size_t) override {
    return MemoryBudget::footprint(work_of(*batch.items.front()).beside_bytes);
  }
  StepRefusal too_big(const Batch&, uint64_t, uint64_t) const override {
    return testing::step_too_big();
  }
  StepOutput run(const Batch& batch, MemoryBudget&) override {
    LaneWork& work = work_of(*batch.items.front());
    log_.add("run beside");
    testing::use_workspace(runtime_.context(), work.beside_bytes);
    return {.audio = {std::vector<float>{-static_cast<float>(work.beside--)}}, .errors = {nullptr}};
  }
  void warm_up(VoiceEntry&, const Pacing&, MemoryBudget&) override {}

 private:
  DeviceRuntime& runtime_;
  EventLog& log_;
};

class StepsInFlight : public ::testing::Test {
 protected:
  // One voice "a", under a 12 MiB limit; "queued" the first kind: at equal slack it is chosen
  // before "beside".
  StepsInFlight()
      : engine_(std::make_unique<testing::MadeUpFamily>(
                    kType, [this](Context&) { return std::make_unique<Recording>(log_); },
                    [this](DeviceRuntime& runtime) {
                      std::vector<std::unique_ptr<StepKind>> kinds;
                      kinds.push_back(std::make_unique<QueuedKind>(runtime, log_));
                      kinds.push_back(std::make_unique<BesideKind>(runtime, log_));
                      return kinds;
                    }),
                {"a"}, 12 * kMiB) {}

  std::vector<float> speak(std::unique_ptr<LaneWork> work) {
    return testing::speak(engine_.scheduler(), engine_.voice("a"), std::move(work));
  }
  Scheduler& scheduler() { return engine_.scheduler(); }

  EventLog log_;  // before the engine, whose kinds log into it
  testing::MadeUpEngine engine_;
};

using Events = std::vector<std::string>;

TEST_F(StepsInFlight, AStepOfAnotherLaneRunsBeforeTheOneInFlightFinishes) {
  const std::vector<float> samples = speak(std::make_unique<LaneWork>(1, 1));
  EXPECT_EQ(log_.events(), (Events{"start queued", "run beside", "finish queued"}));
  // Delivered in the order the steps started: the queued step's sample first.
  EXPECT_EQ(samples, (std::vector<float>{1.0f, -1.0f}));
  EXPECT_EQ(scheduler().counts("beside").beside, 1u);
  EXPECT_EQ(scheduler().counts("queued").beside, 0u);
  EXPECT_EQ(scheduler().counts("queued").steps, 1u);
}

TEST_F(StepsInFlight, AStepOfTheSameLaneWaitsForTheOneInFlight) {
  const std::vector<float> samples = speak(std::make_unique<LaneWork>(3, 0));
  EXPECT_EQ(log_.events(), (Events{"start queued", "finish queued", "start queued", "finish queued",
                                   "start queued", "finish queued"}));
  EXPECT_EQ(samples, (std::vector<float>{3.0f, 2.0f, 1.0f}));
  EXPECT_EQ(scheduler().counts("queued").beside, 0u);
}

TEST_F(StepsInFlight, AFinishThatThrowsFailsItsStreamAndTheSchedulerGoesOn) {
  auto failing = std::make_unique<LaneWork>(1, 1);
  failing->queued_throws = true;
  try {
    (void)speak(std::move(failing));
    ADD_FAILURE() << "the stream whose queued step failed ended well";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("the queued work failed on the device"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(log_.events(), (Events{"start queued", "run beside", "finish queued"}));
  EXPECT_EQ(speak(std::make_unique<LaneWork>(1, 1)), (std::vector<float>{1.0f, -1.0f}));
}

TEST_F(StepsInFlight, TheStepInFlightFinishesBeforeRecordingsAreReleasedForMemory) {
  // The queued step keeps a 4 MiB recording; the beside step's 10 MiB fit the 12 MiB limit only
  // without it, so the scheduler releases it, and the step in flight must be done first.
  auto work = std::make_unique<LaneWork>(1, 1);
  work->queued_records = true;
  work->beside_bytes = 10 * kMiB;
  EXPECT_EQ(speak(std::move(work)), (std::vector<float>{1.0f, -1.0f}));
  EXPECT_EQ(log_.events(), (Events{"start queued", "finish queued", "release", "run beside"}));
}

TEST_F(StepsInFlight, AStepThatFitsOnlyOnceTheOneInFlightIsDoneWaitsForIt) {
  // The queued step holds 8 MiB until it finishes; the beside step's 8 MiB fit the 12 MiB limit
  // only after that: it runs after the finish instead of being refused.
  auto work = std::make_unique<LaneWork>(1, 1);
  work->queued_bytes = 8 * kMiB;
  work->beside_bytes = 8 * kMiB;
  EXPECT_EQ(speak(std::move(work)), (std::vector<float>{1.0f, -1.0f}));
  EXPECT_EQ(log_.events(), (Events{"start queued", "finish queued", "run beside"}));
  EXPECT_EQ(scheduler().counts("beside").beside, 0u);
}

}  // namespace
}  // namespace voxd::scheduler
