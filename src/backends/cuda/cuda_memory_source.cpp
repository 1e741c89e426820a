#include "backends/cuda/cuda_memory_source.h"

#include <cuda_runtime_api.h>

#include <string>

#include "backends/cuda/cuda_check.h"
#include "core/error.h"

namespace voxd {
namespace {

// Makes `index` the calling thread's current device and restores the previous one on exit, so a
// source never changes which device other code on the thread talks to.
class DeviceGuard {
 public:
  DeviceGuard(int index, const char* op) {
    check(cudaGetDevice(&previous_), "cudaGetDevice", op, index);
    if (previous_ != index) {
      check(cudaSetDevice(index), "cudaSetDevice", op, index);
      switched_ = true;
    }
  }
  ~DeviceGuard() {
    if (switched_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

  static void check(cudaError_t status, const char* call, const char* op, int index) {
    if (status == cudaSuccess) return;
    cudaGetLastError();
    throw Error("cuda:" + std::to_string(index) + " memory source: " + op + ": " + call +
                " failed: " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
  }

 private:
  int previous_ = 0;
  bool switched_ = false;
};

}  // namespace

CudaMemorySource::CudaMemorySource(int index) : index_(index) {
  cuda::require_device(index);
}

void* CudaMemorySource::reserve(size_t bytes) {
  DeviceGuard guard(index_, "reserve");
  void* ptr = nullptr;
  const cudaError_t status = cudaMalloc(&ptr, bytes);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky: clear it so the next launch check does not report it
    ++failed_reserves_;
    return nullptr;
  }
  DeviceGuard::check(status, "cudaMalloc", "reserve", index_);
  return ptr;
}

void CudaMemorySource::release(void* ptr, size_t /*bytes*/) {
  if (ptr == nullptr) return;
  int previous = 0;
  const bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != index_ &&
                        cudaSetDevice(index_) == cudaSuccess;
  cudaFree(ptr);
  if (switched) cudaSetDevice(previous);
}

CudaMemoryInfo CudaMemorySource::memory_info() const {
  DeviceGuard guard(index_, "memory_info");
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  DeviceGuard::check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo", "memory_info",
                     index_);
  return {free_bytes, total_bytes};
}

std::string CudaMemorySource::pci_bus_id() const {
  char id[64] = {};
  DeviceGuard::check(cudaDeviceGetPCIBusId(id, sizeof(id), index_), "cudaDeviceGetPCIBusId",
                     "pci_bus_id", index_);
  return id;
}

}  // namespace voxd
