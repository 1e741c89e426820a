// Helpers for backend tests: seeded random tensors, an allocator that poisons new memory with
// NaN so elements a kernel forgot to write show up, and element-wise comparison.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/tensor.h"

namespace voxd::testing {

// Host allocator whose fresh memory is all 0xFF bytes: NaN as F32, -1 as I64.
class PoisonAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    void* p = host_allocator().allocate(bytes);
    std::memset(p, 0xFF, bytes);
    return p;
  }
  void deallocate(void* ptr, size_t bytes) override { host_allocator().deallocate(ptr, bytes); }
  Device device() const override { return Device::cpu(); }
  AllocatorStats stats() const override { return host_allocator().stats(); }
};

// Uniform values in [lo, hi) from a fixed seed.
inline Tensor random_tensor(const Shape& shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> values(static_cast<size_t>(shape_numel(shape)));
  for (float& v : values) v = dist(rng);
  return Tensor::from_vector(shape, values);
}

// Expects equal shapes and |actual − expected| <= tol · max(1, |expected|) everywhere. NaN must
// match NaN position for position when allow_nan, and fails otherwise.
inline void expect_close(const Tensor& actual, const Tensor& expected, double tol,
                         const std::string& what, bool allow_nan = false) {
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  const std::vector<float> a = actual.to_float_vector();
  const std::vector<float> e = expected.to_float_vector();
  double worst = 0;
  size_t worst_at = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(e[i]) || std::isnan(a[i])) {
      ASSERT_TRUE(allow_nan && std::isnan(e[i]) && std::isnan(a[i]))
          << what << ": element " << i << " is " << a[i] << ", expected " << e[i];
      continue;
    }
    const double err = std::abs(static_cast<double>(a[i]) - e[i]) /
                       std::max(1.0, std::abs(static_cast<double>(e[i])));
    if (err > worst) {
      worst = err;
      worst_at = i;
    }
  }
  EXPECT_LE(worst, tol) << what << ": worst error at element " << worst_at << " (got "
                        << a[worst_at] << ", expected " << e[worst_at] << ")";
}

inline void expect_values(const Tensor& actual, const Shape& shape,
                          const std::vector<float>& expected, double tol = 1e-6) {
  expect_close(actual, Tensor::from_vector(shape, expected), tol, "hand-computed values");
}

}  // namespace voxd::testing
