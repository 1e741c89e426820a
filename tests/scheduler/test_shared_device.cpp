// A device shared with another process: a made-up family on a device of 32 MiB (a HostMemorySource
// of that capacity) from which the test takes memory as another process would. A step short of
// memory only because of what the other process took is answered 503 with Retry-After (the server
// is short of memory for now; the request is not too large), one larger than the device even so
// 413, and under a limit the other process's memory is counted before the allocator would fail;
// and MemoryBudget's view of that memory on its own.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/runtime.h"
#include "core/memory_source.h"
#include "core/ops.h"
#include "made_up_family.h"
#include "scheduler/family.h"
#include "scheduler/scheduler.h"
#include "server/api_error.h"

namespace voxd::scheduler {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kDevice = 32 * kMiB;
constexpr char kType[] = "test-shared-device";

class SharedDevice : public ::testing::Test {
 protected:
  // The engine of voice "a" on the shared device, under `limit` if any; `after_step` as
  // OneStepKind takes it.
  void start(std::optional<uint64_t> limit = std::nullopt,
             testing::OneStepKind::AfterStep after_step = {}) {
    testing::MadeUpEngine::Families families;
    families.emplace_back(
        std::make_unique<testing::MadeUpFamily>(
            kType, [](Context&) { return std::make_unique<LoadedVoice>(); },
            [after_step](DeviceRuntime& runtime) {
              std::vector<std::unique_ptr<StepKind>> kinds;
              kinds.push_back(std::make_unique<testing::OneStepKind>(runtime, after_step));
              return kinds;
            }),
        std::vector<std::string>{"a"});
    RuntimeOptions runtime{.backend = "cpu", .threads = 1, .source = device_};
    if (limit) runtime.memory_limit = MemoryAmount::bytes(*limit);
    engine_ = std::make_unique<testing::MadeUpEngine>(std::move(families), runtime);
  }

  // Admits a stream whose one step takes `step_bytes` and waits for its end: its samples, or
  // the exception it failed with.
  std::vector<float> speak(uint64_t step_bytes) {
    return testing::speak(engine_->scheduler(), engine_->voice("a"),
                          std::make_unique<testing::OneStepWork>(step_bytes));
  }

  // The ApiError speak(step_bytes) fails with; fails the test when it succeeds.
  server::ApiError refusal(uint64_t step_bytes) {
    try {
      (void)speak(step_bytes);
    } catch (const server::ApiError& e) {
      return e;
    }
    ADD_FAILURE() << "a step of " << step_bytes << " bytes ran";
    return {};
  }

  // Memory the other process holds until this is gone.
  class Taken {
   public:
    Taken(HostMemorySource& device, size_t bytes)
        : device_(device), bytes_(bytes), memory_(device.reserve(bytes)) {}
    Taken(const Taken&) = delete;
    Taken& operator=(const Taken&) = delete;
    ~Taken() { device_.release(memory_, bytes_); }
    bool held() const { return memory_ != nullptr; }

   private:
    HostMemorySource& device_;
    size_t bytes_;
    void* memory_;
  };

  std::shared_ptr<HostMemorySource> device_ = std::make_shared<HostMemorySource>(kDevice);
  std::unique_ptr<testing::MadeUpEngine> engine_;
};

// What the budget would have but for memory another process took: growth under 1 % of the device
// is not counted (the server itself takes some later), and the host's heap, whose pages are taken
// only when touched, gives no reading to count.
TEST(MemoryBudget, CountsWhatAnotherProcessTookPastOnePercentOfTheDevice) {
  const auto device = std::make_shared<HostMemorySource>(kDevice);
  DeviceRuntime runtime(RuntimeOptions{.backend = "cpu", .threads = 1, .source = device});
  const MemoryBudget budget(runtime);
  EXPECT_EQ(budget.available(), kDevice);
  void* small = device->reserve(kDevice / 128);
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(budget.available(), kDevice - kDevice / 128);
  EXPECT_EQ(budget.available_but_for_outside(), budget.available());
  void* large = device->reserve(8 * kMiB);
  ASSERT_NE(large, nullptr);
  EXPECT_EQ(budget.available(), kDevice - kDevice / 128 - 8 * kMiB);
  EXPECT_EQ(budget.available_but_for_outside(), kDevice);
  device->release(large, 8 * kMiB);
  device->release(small, kDevice / 128);

  DeviceRuntime host(RuntimeOptions{.backend = "cpu", .threads = 1});
  const Tensor touched = ops::zeros(host.context(), {static_cast<int64_t>(4 * kMiB)});
  EXPECT_EQ(host.outside_growth(), 0u);
}

TEST_F(SharedDevice, AStepShortOfWhatAnotherProcessTookIsToldToRetry) {
  start();
  {
    const Taken taken(*device_, 24 * kMiB);
    ASSERT_TRUE(taken.held());
    const server::ApiError e = refusal(12 * kMiB);
    EXPECT_EQ(e.status, 503);
    EXPECT_EQ(e.code, "insufficient_memory");
    EXPECT_EQ(e.retry_after_s, 1);
    EXPECT_NE(e.message.find("another process"), std::string::npos) << e.message;
    EXPECT_EQ(speak(4 * kMiB).size(), 160u);  // what still fits runs
  }
  EXPECT_EQ(speak(12 * kMiB).size(), 160u);  // retried once the memory is back
}

TEST_F(SharedDevice, AStepLargerThanTheDeviceIsTooLargeWhateverElseHoldsMemory) {
  start();
  EXPECT_EQ(refusal(40 * kMiB).status, 413);
  const Taken taken(*device_, 24 * kMiB);
  ASSERT_TRUE(taken.held());
  const server::ApiError e = refusal(40 * kMiB);
  EXPECT_EQ(e.status, 413);
  EXPECT_EQ(e.code, "step_too_big");
}

TEST_F(SharedDevice, UnderALimitTheDevicesFreeMemoryCountsBeforeTheAllocatorFails) {
  start(24 * kMiB);
  const Taken taken(*device_, 24 * kMiB);
  ASSERT_TRUE(taken.held());
  // 12 MiB fit the limit but not the 8 MiB the device has left.
  const server::ApiError e = refusal(12 * kMiB);
  EXPECT_EQ(e.status, 503);
  EXPECT_EQ(e.code, "insufficient_memory");
  EXPECT_EQ(engine_->runtime().allocator().stats().num_ooms, 0u);
  EXPECT_EQ(speak(4 * kMiB).size(), 160u);
}

// A step too large to run whole runs smaller where its kind can cut it (StepKind::shrink), rather
// than failing the stream: 48 MiB on the 32 MiB device runs as 12 while another process holds 16,
// as 24 once it has given them back, and one its kind cannot cut below 40 MiB is refused as
// before.
TEST_F(SharedDevice, AStepTooLargeWholeRunsSmallerWhereItsKindCanCutIt) {
  std::vector<uint64_t> ran;
  start(std::nullopt, [&ran](const Batch& batch) {
    ran.push_back(static_cast<const testing::OneStepWork&>(*batch.items.front()->work).step_bytes);
  });
  const auto speak_cut = [&](uint64_t step_bytes, uint64_t least_bytes) {
    return testing::speak(engine_->scheduler(), engine_->voice("a"),
                          std::make_unique<testing::OneStepWork>(step_bytes, least_bytes));
  };
  {
    const Taken taken(*device_, 16 * kMiB);
    ASSERT_TRUE(taken.held());
    EXPECT_EQ(speak_cut(48 * kMiB, 4 * kMiB).size(), 160u);
  }
  EXPECT_EQ(speak_cut(48 * kMiB, 4 * kMiB).size(), 160u);
  EXPECT_EQ(ran, (std::vector<uint64_t>{12 * kMiB, 24 * kMiB}));
  EXPECT_EQ(refusal(40 * kMiB).status, 413);
  try {
    (void)speak_cut(80 * kMiB, 40 * kMiB);
    ADD_FAILURE() << "a step its kind cannot cut below 40 MiB ran on a 32 MiB device";
  } catch (const server::ApiError& e) {
    EXPECT_EQ(e.status, 413);
  }
}

}  // namespace
}  // namespace voxd::scheduler
