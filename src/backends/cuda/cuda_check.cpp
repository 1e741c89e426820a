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

namespace {

const char* cufft_result_name(cufftResult status) {
  switch (status) {
    case CUFFT_INVALID_PLAN:
      return "CUFFT_INVALID_PLAN";
    case CUFFT_ALLOC_FAILED:
      return "CUFFT_ALLOC_FAILED";
    case CUFFT_INVALID_TYPE:
      return "CUFFT_INVALID_TYPE";
    case CUFFT_INVALID_VALUE:
      return "CUFFT_INVALID_VALUE";
    case CUFFT_INTERNAL_ERROR:
      return "CUFFT_INTERNAL_ERROR";
    case CUFFT_EXEC_FAILED:
      return "CUFFT_EXEC_FAILED";
    case CUFFT_SETUP_FAILED:
      return "CUFFT_SETUP_FAILED";
    case CUFFT_INVALID_SIZE:
      return "CUFFT_INVALID_SIZE";
    case CUFFT_NOT_SUPPORTED:
      return "CUFFT_NOT_SUPPORTED";
    default:
      return "cufftResult";
  }
}

}  // namespace

void check(cufftResult status, const char* call, const char* op) {
  if (status == CUFFT_SUCCESS) return;
  throw Error(std::string("cuda: ") + op + ": " + call + " failed: " + cufft_result_name(status) +
              " (" + std::to_string(static_cast<int>(status)) + ")");
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
