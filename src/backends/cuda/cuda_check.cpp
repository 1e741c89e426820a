#include "backends/cuda/cuda_check.h"

#include <string>

#include "core/error.h"

namespace voxd::cuda {

void check(cudaError_t status, const char* call, const char* op) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // reset a non-sticky error so later checks report their own failures
  throw Error(std::string("cuda: ") + op + ": " + call + " failed: " + cudaGetErrorName(status) +
              " (" + cudaGetErrorString(status) + ")");
}

void check(cublasStatus_t status, const char* call, const char* op) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw Error(std::string("cuda: ") + op + ": " + call + " failed: " + cublasGetStatusName(status) +
              " (" + cublasGetStatusString(status) + ")");
}

void require_device(int index) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    throw InputError(std::string("no CUDA device: cudaGetDeviceCount returned ") +
                     cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
  }
  if (index < 0 || index >= count) {
    throw InputError("no CUDA device cuda:" + std::to_string(index) +
                     ": cudaGetDeviceCount returned " + std::to_string(count) + " device(s)");
  }
}

}  // namespace voxd::cuda
