// Checks for CUDA runtime, cuBLAS and cuFFT results: a failed call throws voxd::Error naming the
// op, the call and the error, e.g. "cuda: linear: cublasGemmStridedBatchedEx(...) failed:
// CUBLAS_STATUS_INVALID_VALUE". Internal to the CUDA backend.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cufft.h>

namespace voxd::cuda {

// Throws voxd::Error unless `status` is cudaSuccess.
void check(cudaError_t status, const char* call, const char* op);
// Throws voxd::Error unless `status` is CUBLAS_STATUS_SUCCESS.
void check(cublasStatus_t status, const char* call, const char* op);
// Throws voxd::Error unless `status` is CUFFT_SUCCESS.
void check(cufftResult status, const char* call, const char* op);
// Throws voxd::InputError when there is no CUDA device `index` ("no CUDA device cuda:1: ...").
void require_device(int index);

}  // namespace voxd::cuda

// VOXD_CUDA_CHECK(op, call): runs `call` (a cudaError_t, cublasStatus_t or cufftResult
// expression) and throws
// on failure; `op` names the backend operation for the message.
#define VOXD_CUDA_CHECK(op, call) ::voxd::cuda::check((call), #call, (op))
