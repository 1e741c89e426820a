// make_backend("cuda") and DeviceRuntime on "cuda" on any machine: a backend and device memory
// on cuda:0 when a GPU is present, else an InputError that says why. Runs in CI (no GPU) as well
// as on the GPU machine.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "backends/runtime.h"
#include "core/error.h"

namespace voxd {
namespace {

// The InputError message make_backend(name) throws; fails the test when it throws nothing.
std::string input_error(const std::string& name) {
  try {
    make_backend(name);
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "make_backend(\"" << name << "\") did not throw";
  return "";
}

TEST(CudaRegistry, MakesTheBackendOrSaysWhyNot) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  if (count > 0) {
    EXPECT_EQ(make_backend("cuda")->name(), "cuda:0");
    EXPECT_EQ(make_backend("cuda:0")->device(), Device::cuda(0));
  } else {
    const std::string message = input_error("cuda");
    EXPECT_EQ(message.rfind("no CUDA device: cudaGetDeviceCount returned ", 0), 0u) << message;
  }
  EXPECT_NE(input_error("cuda:" + std::to_string(count)).find("no CUDA device"), std::string::npos);
}

TEST(CudaRegistry, TheRuntimeOpensDeviceMemoryOrSaysWhyNot) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  if (count > 0) {
    DeviceRuntime runtime(RuntimeOptions{.backend = "cuda"});
    EXPECT_EQ(runtime.allocator().device(), Device::cuda(0));
    EXPECT_EQ(runtime.context().device(), Device::cuda(0));
    EXPECT_GT(runtime.breakdown().total, 0u);
  } else {
    try {
      DeviceRuntime runtime(RuntimeOptions{.backend = "cuda"});
      ADD_FAILURE() << "a cuda runtime without a GPU";
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("no CUDA device", 0), 0u) << e.what();
    }
  }
}

TEST(CudaRegistry, RejectsMalformedNames) {
  for (const char* name : {"cuda:", "cuda:x", "cuda:-1", "cudax", "cuda:12345"}) {
    EXPECT_NE(input_error(name).find("expected cuda or cuda:N"), std::string::npos) << name;
  }
  const std::vector<std::string> names = backend_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "cuda"), names.end());
}

}  // namespace
}  // namespace voxd
