// A family whose step kind cannot choose a step (its propose throws: a stream's state broke the
// kind's rules) fails its own streams, and the scheduler goes on with every other family's. Two
// made-up families on the CPU backend.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "backends/runtime.h"
#include "made_up_family.h"
#include "scheduler/family.h"
#include "scheduler/scheduler.h"

namespace voxd::scheduler {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// Units of work, one sample each (the units left, counting down); none is taken while `held`.
class Units final : public StreamWork {
 public:
  Units(int left, const std::atomic<bool>& held) : left(left), held(held) {}
  bool finished() const override { return left == 0; }
  StreamGauges gauges() const override { return {}; }
  void release() override {}

  int left;
  const std::atomic<bool>& held;
};

// One unit of the first stream with units left and not held; a broken kind throws instead.
class UnitKind final : public StepKind {
 public:
  explicit UnitKind(bool broken) : broken_(broken) {}
  const char* name() const override { return broken_ ? "broken" : "unit"; }
  Batch propose(const std::vector<std::shared_ptr<Stream>>& streams, const Pacing& pacing,
                Clock::time_point now) override {
    if (broken_) throw std::logic_error("a stream's state broke the kind's rules");
    return testing::first_wanting(streams, pacing, now, [](const Stream& stream) {
      const auto& units = static_cast<const Units&>(*stream.work);
      return units.left > 0 && !units.held.load();
    });
  }
  uint64_t footprint(const Batch&, size_t) override { return 0; }
  StepRefusal too_big(const Batch&, uint64_t, uint64_t) const override { return {}; }
  StepOutput run(const Batch& batch, MemoryBudget&) override {
    auto& units = static_cast<Units&>(*batch.items.front()->work);
    return {.audio = {std::vector<float>{static_cast<float>(units.left--)}}, .errors = {nullptr}};
  }
  void warm_up(VoiceEntry&, const Pacing&, MemoryBudget&) override {}

 private:
  bool broken_;
};

std::unique_ptr<testing::MadeUpFamily> family_of(const std::string& type, bool broken) {
  return std::make_unique<testing::MadeUpFamily>(
      type, [](Context&) { return std::make_unique<LoadedVoice>(); },
      [broken](DeviceRuntime&) {
        std::vector<std::unique_ptr<StepKind>> kinds;
        kinds.push_back(std::make_unique<UnitKind>(broken));
        return kinds;
      });
}

TEST(BrokenFamily, FailsItsOwnStreamsAndNoOtherFamilys) {
  testing::MadeUpEngine::Families families;
  families.emplace_back(family_of("test-sound", false), std::vector<std::string>{"sound"});
  families.emplace_back(family_of("test-broken", true), std::vector<std::string>{"broken"});
  testing::MadeUpEngine engine(std::move(families), 8 * kMiB);
  Scheduler& scheduler = engine.scheduler();
  std::atomic<bool> held{true};
  // The sound family's stream is admitted and waits while the broken family's fails.
  auto sound = std::async(std::launch::async, [&] {
    return testing::speak(scheduler, engine.voice("sound"), std::make_unique<Units>(3, held));
  });
  // However the test ends, the stream is let go before its future is waited for.
  struct Release {
    std::atomic<bool>& held;
    ~Release() { held.store(false); }
  } release{held};
  for (int i = 0; i < 500 && scheduler.admitted() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(scheduler.admitted(), 1u);
  const std::atomic<bool> never_held{false};
  EXPECT_THROW(
      testing::speak(scheduler, engine.voice("broken"), std::make_unique<Units>(3, never_held)),
      std::logic_error);
  held.store(false);
  EXPECT_EQ(sound.get(), (std::vector<float>{3, 2, 1}));
}

}  // namespace
}  // namespace voxd::scheduler
