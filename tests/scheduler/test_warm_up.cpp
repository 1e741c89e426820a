// A voice a step loads (a lazy voice's first request, or a voice loaded again after an unload)
// is warmed up while the device is idle afterwards, as the voices loaded at start-up are before
// the first request: a made-up family whose kind counts its warm-ups, two lazy voices whose
// weights fit the memory limit only one at a time.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/runtime.h"
#include "made_up_family.h"
#include "scheduler/family.h"
#include "scheduler/scheduler.h"

namespace voxd::scheduler {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kWeightBytes = 8 * kMiB;  // two voices' do not fit kLimit
constexpr uint64_t kLimit = 12 * kMiB;
constexpr char kType[] = "test-warm-up";

// One step makes the stream's audio.
class OneStep final : public StreamWork {
 public:
  bool finished() const override { return done; }
  StreamGauges gauges() const override { return {}; }
  void release() override {}

  bool done = false;
};

class Weights final : public LoadedVoice {
 public:
  explicit Weights(Context& ctx)
      : weights(ops::empty(ctx, {static_cast<int64_t>(kWeightBytes / 4)}, DType::F32)) {}
  Tensor weights;
};

// How many times each voice's warm_up and warm_further ran, and each voice's pieces since its
// last warm_up.
struct WarmUps {
  std::map<std::string, int> warm_up, warm_further, pieces;
  std::mutex mutex;

  int count(std::map<std::string, int>& counts, const std::string& voice) {
    std::lock_guard lock(mutex);
    return counts[voice];
  }
};

class CountingKind final : public StepKind {
 public:
  explicit CountingKind(WarmUps& warm_ups) : warm_ups_(warm_ups) {}
  const char* name() const override { return "counting"; }
  Batch propose(const std::vector<std::shared_ptr<Stream>>& streams, const Pacing& pacing,
                Clock::time_point now) override {
    return testing::first_wanting(streams, pacing, now, [](const Stream& stream) {
      return !static_cast<const OneStep&>(*stream.work).done;
    });
  }
  uint64_t footprint(const Batch&, size_t) override { return 0; }
  StepRefusal too_big(const Batch&, uint64_t, uint64_t) const override {
    return testing::step_too_big();
  }
  StepOutput run(const Batch& batch, MemoryBudget&) override {
    static_cast<OneStep&>(*batch.items.front()->work).done = true;
    return {.audio = {std::vector<float>(160, 0.5f)}, .errors = {nullptr}};
  }
  void warm_up(VoiceEntry& voice, const Pacing&, MemoryBudget&) override {
    EXPECT_NE(voice.models, nullptr) << "warm_up of a voice that is not loaded";
    std::lock_guard lock(warm_ups_.mutex);
    ++warm_ups_.warm_up[voice.card().name];
    warm_ups_.pieces[voice.card().name] = 0;  // its pieces start over, as the real kinds' do
  }
  // Two pieces a voice after each warm_up.
  bool warm_further(VoiceEntry& voice, const Pacing&, MemoryBudget&) override {
    std::lock_guard lock(warm_ups_.mutex);
    ++warm_ups_.warm_further[voice.card().name];
    return ++warm_ups_.pieces[voice.card().name] < 2;
  }

 private:
  WarmUps& warm_ups_;
};

class WarmUpAfterLoad : public ::testing::TestWithParam<bool> {
 protected:
  // Lazy voices "a" and "b" under a 12 MiB limit; GetParam(): whether the kinds warm further
  // while idle (the CPU backend's first runs cost no more, so only when the test asks).
  WarmUpAfterLoad()
      : engine_(std::make_unique<testing::MadeUpFamily>(
                    kType, [](Context& ctx) { return std::make_unique<Weights>(ctx); },
                    [this](DeviceRuntime&) {
                      std::vector<std::unique_ptr<StepKind>> kinds;
                      kinds.push_back(std::make_unique<CountingKind>(warm_ups_));
                      return kinds;
                    }),
                {"a", "b"}, kLimit, /*lazy=*/true, options(GetParam())) {}

  static SchedulerOptions options(bool while_idle) {
    SchedulerOptions options;
    options.warm_up_while_idle = while_idle;
    return options;
  }

  // Speaks on `voice`, then waits for the warm-up while idle to end.
  void speak(const std::string& voice) {
    EXPECT_EQ(
        testing::speak(engine_.scheduler(), engine_.voice(voice), std::make_unique<OneStep>()),
        std::vector<float>(160, 0.5f));
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (engine_.scheduler().load().warm_up_pending > 0 &&
           std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(engine_.scheduler().load().warm_up_pending, 0u);
  }
  bool loaded(const std::string& voice) { return engine_.voice(voice).models != nullptr; }
  int warm_up(const std::string& voice) { return warm_ups_.count(warm_ups_.warm_up, voice); }
  int warm_further(const std::string& voice) {
    return warm_ups_.count(warm_ups_.warm_further, voice);
  }

  WarmUps warm_ups_;  // before the engine, whose kind counts into it
  testing::MadeUpEngine engine_;
};

TEST_P(WarmUpAfterLoad, EachLoadOfAVoiceIsWarmedUpOnce) {
  const int pieces = GetParam() ? 2 : 0;  // warm_further calls after each warm_up
  EXPECT_FALSE(loaded("a"));
  EXPECT_EQ(warm_up("a"), 0) << "a lazy voice is not warmed up before it is loaded";

  speak("a");
  EXPECT_EQ(warm_up("a"), 1);
  EXPECT_EQ(warm_further("a"), pieces);

  speak("b");  // its weights fit only once "a" is unloaded
  EXPECT_FALSE(loaded("a"));
  EXPECT_EQ(warm_up("b"), 1);
  EXPECT_EQ(warm_further("b"), pieces);

  speak("b");  // loaded already: nothing to warm
  EXPECT_EQ(warm_up("b"), 1);

  speak("a");  // loaded again
  EXPECT_FALSE(loaded("b"));
  EXPECT_EQ(warm_up("a"), 2);
  EXPECT_EQ(warm_further("a"), 2 * pieces);
}

INSTANTIATE_TEST_SUITE_P(WhileIdle, WarmUpAfterLoad, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "AndFurther" : "WarmUpOnly";
                         });

}  // namespace
}  // namespace voxd::scheduler
