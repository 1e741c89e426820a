// Helpers for the CUDA tests: one CudaBackend for the whole test binary, a device allocator that
// poisons new memory (0xFF bytes: NaN in every float dtype, −1 as I64) so elements a kernel never
// writes show up, the fixture root, and the tolerance rules per dtype.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cuda/cuda_allocator.h"
#include "backends/cuda/cuda_backend.h"
#include "core/error.h"
#include "core/tensor.h"

namespace voxd::testing {

// The backend on device 0, created on first use.
inline CudaBackend& cuda_backend() {
  static CudaBackend backend(0);
  return backend;
}

class PoisonDeviceAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    void* p = inner_.allocate(bytes);
    const cudaError_t status = cudaMemset(p, 0xFF, bytes);
    if (status != cudaSuccess)
      throw Error(std::string("cudaMemset: ") + cudaGetErrorString(status));
    return p;
  }
  void deallocate(void* ptr, size_t bytes) override { inner_.deallocate(ptr, bytes); }
  Device device() const override { return inner_.device(); }
  AllocatorStats stats() const override { return inner_.stats(); }

 private:
  CudaDeviceAllocator inner_{0};
};

// The repository root: $VOXD_SOURCE_DIR when set (a build carried to another machine), else the
// source directory the tests were built from.
inline std::string source_dir() {
  const char* env = std::getenv("VOXD_SOURCE_DIR");
  return env != nullptr ? env : VOXD_SOURCE_DIR;
}

// Host F32 copy of t rounded to `dtype` and back (what a device tensor of that dtype holds).
inline Tensor round_to(const Tensor& t, DType dtype) {
  return t.to_host_contiguous(dtype).to_host_contiguous(DType::F32);
}

// sqrt(Σ (a − e)²) / sqrt(Σ e²); the shapes must match.
inline double relative_l2(const Tensor& actual, const Tensor& expected) {
  EXPECT_EQ(actual.shape(), expected.shape());
  if (actual.shape() != expected.shape()) return INFINITY;
  const std::vector<float> a = actual.to_float_vector();
  const std::vector<float> e = expected.to_float_vector();
  double diff = 0;
  double norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (static_cast<double>(a[i]) - e[i]) * (static_cast<double>(a[i]) - e[i]);
    norm += static_cast<double>(e[i]) * e[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

// Half-precision comparison: NaN where expected has NaN (when allow_nan) and elsewhere
// max |a − e| <= tol · max(1, max |e|), i.e. relative to the output's scale, since one rounding
// of an intermediate larger than the result is already a large error relative to that element.
inline void expect_close_scaled(const Tensor& actual, const Tensor& expected, double tol,
                                const std::string& what, bool allow_nan = false) {
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  const std::vector<float> a = actual.to_float_vector();
  const std::vector<float> e = expected.to_float_vector();
  double scale = 1;
  for (float v : e) {
    if (!std::isnan(v)) scale = std::max(scale, std::abs(static_cast<double>(v)));
  }
  double worst = 0;
  size_t worst_at = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(e[i]) || std::isnan(a[i])) {
      ASSERT_TRUE(allow_nan && std::isnan(e[i]) && std::isnan(a[i]))
          << what << ": element " << i << " is " << a[i] << ", expected " << e[i];
      continue;
    }
    const double err = std::abs(static_cast<double>(a[i]) - e[i]);
    if (err > worst) {
      worst = err;
      worst_at = i;
    }
  }
  EXPECT_LE(worst / scale, tol) << what << ": worst error at element " << worst_at << " (got "
                                << a[worst_at] << ", expected " << e[worst_at] << ", scale "
                                << scale << ")";
}

}  // namespace voxd::testing
