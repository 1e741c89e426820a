// The scheduler gives back memory held only for speed before it refuses a step for memory, when
// that makes the step fit: a made-up family whose step kind records a "graph" (a block in the
// runtime's persistent context, as recorded CUDA graphs are) on a voice's first step, under a
// limit that leaves room for a larger step only once that recording is released.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "backends/runtime.h"
#include "core/error.h"
#include "made_up_family.h"
#include "scheduler/family.h"
#include "scheduler/scheduler.h"
#include "server/api_error.h"

namespace voxd::scheduler {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kRecordingBytes = 4 * kMiB;
constexpr uint64_t kLimit = 12 * kMiB;
constexpr char kType[] = "test-recorder";

class Recorder final : public LoadedVoice {
 public:
  uint64_t releasable_recording_bytes() const override {
    return recording.defined() ? recording.nbytes() : 0;
  }
  uint64_t release_recordings() override {
    const uint64_t bytes = releasable_recording_bytes();
    if (bytes > 0) ++releases;
    recording = Tensor();
    return bytes;
  }

  Tensor recording;  // in the persistent context, as a graph's arena
  int releases = 0;
};

// After a step, on the voice's first: a recording kept in the persistent context.
testing::OneStepKind::AfterStep record(DeviceRuntime& runtime) {
  return [&runtime](const Batch& batch) {
    auto& recorder = static_cast<Recorder&>(*batch.voice->models);
    if (!recorder.recording.defined()) {
      recorder.recording = ops::empty(runtime.persistent_context(),
                                      {static_cast<int64_t>(kRecordingBytes / 4)}, DType::F32);
    }
  };
}

class Reclaim : public ::testing::Test {
 protected:
  // Voices "a" and "b" under a 12 MiB limit.
  Reclaim()
      : engine_(
            std::make_unique<testing::MadeUpFamily>(
                kType, [](Context&) { return std::make_unique<Recorder>(); },
                [](DeviceRuntime& runtime) {
                  std::vector<std::unique_ptr<StepKind>> kinds;
                  kinds.push_back(std::make_unique<testing::OneStepKind>(runtime, record(runtime)));
                  return kinds;
                }),
            {"a", "b"}, kLimit) {}

  VoiceEntry& voice(const std::string& name) { return engine_.voice(name); }
  Recorder& recorder(const std::string& name) {
    return static_cast<Recorder&>(*voice(name).models);
  }

  // Admits a stream of voice `name` whose one step takes `step_bytes`, and waits for its end:
  // its samples, or the exception it failed with.
  std::vector<float> speak(const std::string& name, uint64_t step_bytes) {
    return testing::speak(engine_.scheduler(), voice(name),
                          std::make_unique<testing::OneStepWork>(step_bytes));
  }

  testing::MadeUpEngine engine_;
};

TEST_F(Reclaim, AStepThatFitsOnlyWithoutTheRecordingsRunsAfterTheyAreReleased) {
  EXPECT_EQ(speak("a", 2 * kMiB).size(), 160u);
  ASSERT_TRUE(recorder("a").recording.defined());
  EXPECT_EQ(engine_.runtime().persistent_bytes(), kRecordingBytes);
  // 10 MiB of workspace: more than the 8 MiB the recording leaves under the 12 MiB limit.
  EXPECT_EQ(speak("a", 10 * kMiB).size(), 160u);
  EXPECT_EQ(recorder("a").releases, 1);
  // That step recorded again: a small one runs beside the recording, releasing nothing.
  EXPECT_TRUE(recorder("a").recording.defined());
  EXPECT_EQ(speak("a", 2 * kMiB).size(), 160u);
  EXPECT_EQ(recorder("a").releases, 1);
}

TEST_F(Reclaim, OneVoiceAtATimeUntilTheStepFits) {
  EXPECT_EQ(speak("a", 2 * kMiB).size(), 160u);
  EXPECT_EQ(speak("b", 2 * kMiB).size(), 160u);
  EXPECT_EQ(engine_.runtime().persistent_bytes(), 2 * kRecordingBytes);
  // 6 MiB against the 4 MiB the two recordings leave: one voice's recording is enough.
  EXPECT_EQ(speak("b", 6 * kMiB).size(), 160u);
  EXPECT_EQ(recorder("a").releases + recorder("b").releases, 1);
}

TEST_F(Reclaim, AStepTooBigEvenWithoutTheRecordingsIsRefusedAndTheyStay) {
  EXPECT_EQ(speak("a", 2 * kMiB).size(), 160u);
  try {
    (void)speak("a", 14 * kMiB);
    ADD_FAILURE() << "a step beyond the limit ran";
  } catch (const server::ApiError& e) {
    EXPECT_EQ(e.status, 413);
    EXPECT_EQ(e.code, "step_too_big");
  }
  // 14 MiB would not fit the 12 MiB limit even without the recording: it was kept.
  EXPECT_EQ(recorder("a").releases, 0);
  EXPECT_TRUE(recorder("a").recording.defined());
  EXPECT_EQ(speak("a", 2 * kMiB).size(), 160u);
}

}  // namespace
}  // namespace voxd::scheduler
