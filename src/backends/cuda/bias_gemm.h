// Row-major out [rows, features] = x [rows, in] · Wᵀ + bias as one cuBLASLt matmul whose epilogue
// adds the bias to the F32 sums before they are rounded to the output's dtype: the same value
// as filling out with the bias and accumulating onto it (beta 1), without the fill's pass over
// the output; with `relu`, the epilogue also clamps the sums at zero (ReLU) before rounding. The
// heuristic's algorithm and the descriptors are kept per shape, dtype and the operands' alignment,
// for the kMaxPlans shapes used last. A new row count first tries the algorithm the heuristic chose
// for another row count of the same power-of-two bucket (checked with cublasLtMatmulAlgoCheck),
// since a heuristic query costs milliseconds and a server meets a new row count with almost every
// step (so a row count's algorithm depends on which row count of its bucket came first in this
// process). Internal to the CUDA backend; one thread at a time, like the backend.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

namespace voxd::cuda {

class BiasGemm {
 public:
  BiasGemm();
  ~BiasGemm();
  BiasGemm(const BiasGemm&) = delete;
  BiasGemm& operator=(const BiasGemm&) = delete;

  // Queues out = x · weightᵀ + bias on `stream` (contiguous row-major operands of `type`, bias
  // [features]), accumulating in F32, through ReLU where `relu`, with `workspace_bytes` of
  // `workspace`. Returns false, queuing nothing, when cuBLASLt cannot describe it or has no
  // algorithm for it (the caller then runs it another way); throws voxd::Error naming `op` when
  // the matmul fails.
  bool run(cudaDataType type, int64_t rows, int64_t in, int64_t features, const void* x,
           const void* weight, const void* bias, void* out, void* workspace, size_t workspace_bytes,
           bool relu, cudaStream_t stream, const char* op);

  // cuBLASLt heuristic queries made so far: one per new bucket, and one per row count whose
  // bucket's algorithm does not apply to it.
  uint64_t heuristic_queries() const { return heuristic_queries_; }

 private:
  struct Plan;
  // type, rows, in, features, the operands' alignment (bytes, up to 256), the workspace size,
  // ReLU.
  using Key = std::tuple<cudaDataType, int64_t, int64_t, int64_t, int, int, int, size_t, bool>;
  struct Entry {
    std::unique_ptr<Plan> plan;  // null: cuBLASLt has no algorithm for the key
    uint64_t last_use = 0;
  };
  // Shapes kept (a server meets a new row count with almost every sentence length).
  static constexpr size_t kMaxPlans = 256;

  // The plan for `key`, made on first use (the least recently used one dropped past kMaxPlans);
  // null when cuBLASLt has no algorithm for it.
  Plan* plan_for(const Key& key, const char* op);

  cublasLtHandle_t handle_ = nullptr;
  std::map<Key, Entry> plans_;
  // The heuristic's algorithm per key with its rows rounded up to a power of two.
  std::map<Key, cublasLtMatmulAlgo_t> bucket_algorithms_;
  uint64_t uses_ = 0;
  uint64_t heuristic_queries_ = 0;
};

}  // namespace voxd::cuda
