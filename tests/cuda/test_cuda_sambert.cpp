// Sambert and KAN-TTS's HiFiGAN on the CUDA backend against the fixtures the host tests use
// (tests/families/sambert/parity.h): durations and band exact, F32 to 1e-4.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <string>

#include "../families/sambert/parity.h"
#include "cuda_test_util.h"

namespace voxd {
namespace {

using testing::cuda_backend;

TEST(CudaSambert, MatchesKanTtsOnEveryFixture) {
  testing::PoisonDeviceAllocator allocator;
  Context ctx(cuda_backend(), allocator);
  float worst = 0.0f;
  for (const std::string& fixture : sambert_testing::kSambertCases) {
    worst = std::max(worst, sambert_testing::check_sambert_fixture(ctx, fixture));
  }
  std::cout << "[ sambert ] cuda: worst mel error " << worst << "\n";
}

TEST(CudaKanTtsHifiGan, MatchesKanTtsOnEveryFixture) {
  testing::PoisonDeviceAllocator allocator;
  Context ctx(cuda_backend(), allocator);
  float worst = 0.0f;
  for (const std::string& fixture : sambert_testing::kHifiGanCases) {
    worst = std::max(worst, sambert_testing::check_hifigan_fixture(ctx, fixture));
  }
  std::cout << "[ kantts hifigan ] cuda: worst audio error " << worst << "\n";
}

}  // namespace
}  // namespace voxd
