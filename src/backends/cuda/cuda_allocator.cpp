#include "backends/cuda/cuda_allocator.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>

#include "backends/cuda/cuda_check.h"
#include "core/error.h"

namespace voxd {

CudaDeviceAllocator::CudaDeviceAllocator(int index) : index_(index) {}

void* CudaDeviceAllocator::allocate(size_t bytes) {
  VOXD_CUDA_CHECK("allocate", cudaSetDevice(index_));
  const size_t request = std::max<size_t>(bytes, 1);
  void* ptr = nullptr;
  const cudaError_t status = cudaMalloc(&ptr, request);
  if (status != cudaSuccess) {
    cudaGetLastError();  // reset the last error so the next launch check does not report it
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++stats_.num_ooms;
    }
    throw Error("cuda:" + std::to_string(index_) + " allocator: cudaMalloc of " +
                std::to_string(bytes) + " bytes failed: " + cudaGetErrorString(status) + " (" +
                std::to_string(free_bytes) + " of " + std::to_string(total_bytes) + " bytes free)");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.count_block(request);
  return ptr;
}

void CudaDeviceAllocator::deallocate(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  // Called from tensor destructors: report nothing by exception. cudaFree waits for the device,
  // so work still reading the block finishes first.
  cudaSetDevice(index_);
  cudaFree(ptr);
  const size_t request = std::max<size_t>(bytes, 1);
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.count_block_freed(request);
}

AllocatorStats CudaDeviceAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace voxd
