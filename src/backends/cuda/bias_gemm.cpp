#include "backends/cuda/bias_gemm.h"

#include <climits>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <utility>

#include "backends/cuda/cuda_check.h"

namespace voxd::cuda {
namespace {

// The largest power of two up to 256 that divides `address` (cuBLASLt's heuristic otherwise
// assumes 256-byte aligned operands).
int alignment_of(const void* address) {
  const auto value = reinterpret_cast<uintptr_t>(address);
  int alignment = 256;
  while (alignment > 1 && value % static_cast<uintptr_t>(alignment) != 0) alignment /= 2;
  return alignment;
}

}  // namespace

// Column-major, as cuBLASLt sees the row-major operands: D [features, rows] = op(A) · B with A
// the weight as stored ([in, features], transposed), B = x ([in, rows]); C is D (beta 0).
struct BiasGemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr;
  cublasLtMatrixLayout_t b = nullptr;
  cublasLtMatrixLayout_t d = nullptr;
  cublasLtMatmulAlgo_t algo{};

  ~Plan() {
    if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

BiasGemm::BiasGemm() = default;

BiasGemm::~BiasGemm() {
  plans_.clear();
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

bool BiasGemm::run(cudaDataType type, int64_t rows, int64_t in, int64_t features, const void* x,
                   const void* weight, const void* bias, void* out, void* workspace,
                   size_t workspace_bytes, bool relu, cudaStream_t stream, const char* op) {
  if (rows > INT_MAX || in > INT_MAX || features > INT_MAX) return false;
  // cuBLASLt documents no alignment for the bias vector: one off 16 bytes goes the other way.
  if (alignment_of(bias) < 16) return false;
  const Key key{type,
                rows,
                in,
                features,
                alignment_of(x),
                alignment_of(weight),
                alignment_of(out),
                workspace_bytes,
                relu};
  Plan* plan = plan_for(key, op);
  if (plan == nullptr) return false;
  VOXD_CUDA_CHECK(op, cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                     &bias, sizeof(bias)));
  const float alpha = 1.0f;
  const float beta = 0.0f;
  VOXD_CUDA_CHECK(
      op, cublasLtMatmul(handle_, plan->desc, &alpha, weight, plan->a, x, plan->b, &beta, out,
                         plan->d, out, plan->d, &plan->algo, workspace, workspace_bytes, stream));
  return true;
}

BiasGemm::Plan* BiasGemm::plan_for(const Key& key, const char* op) {
  const auto found = plans_.find(key);
  if (found != plans_.end()) {
    found->second.last_use = ++uses_;
    return found->second.plan.get();
  }
  if (handle_ == nullptr) VOXD_CUDA_CHECK(op, cublasLtCreate(&handle_));
  if (plans_.size() >= kMaxPlans) {
    // Descriptors are read when a matmul is queued, so dropping one never touches queued work.
    auto oldest = plans_.begin();
    for (auto it = plans_.begin(); it != plans_.end(); ++it) {
      if (it->second.last_use < oldest->second.last_use) oldest = it;
    }
    plans_.erase(oldest);
  }
  const auto [type, rows, in, features, x_align, w_align, out_align, workspace_bytes, relu] = key;
  auto plan = std::make_unique<Plan>();
  // Every step must succeed for a plan; any that does not leaves the key without one, so the
  // caller's other way runs (a cuBLASLt without this epilogue for a type never fails a layer).
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  const auto step = [&](auto&& call) {
    if (status == CUBLAS_STATUS_SUCCESS) status = call();
  };
  const cublasOperation_t transpose = CUBLAS_OP_T;
  const cublasOperation_t keep = CUBLAS_OP_N;
  const cublasLtEpilogue_t epilogue = relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  const auto bias_type = static_cast<int32_t>(type);
  const auto set = [&](cublasLtMatmulDescAttributes_t attribute, const void* value, size_t bytes) {
    step([&] { return cublasLtMatmulDescSetAttribute(plan->desc, attribute, value, bytes); });
  };
  step([&] { return cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F); });
  set(CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose));
  set(CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof(keep));
  set(CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue));
  set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type));
  const auto u64 = [](int64_t v) { return static_cast<uint64_t>(v); };
  step([&] { return cublasLtMatrixLayoutCreate(&plan->a, type, u64(in), u64(features), in); });
  step([&] { return cublasLtMatrixLayoutCreate(&plan->b, type, u64(in), u64(rows), in); });
  step([&] {
    return cublasLtMatrixLayoutCreate(&plan->d, type, u64(features), u64(rows), features);
  });

  cublasLtMatmulPreference_t preference = nullptr;
  step([&] { return cublasLtMatmulPreferenceCreate(&preference); });
  const auto prefer = [&](cublasLtMatmulPreferenceAttributes_t attribute, const void* value,
                          size_t bytes) {
    step([&] { return cublasLtMatmulPreferenceSetAttribute(preference, attribute, value, bytes); });
  };
  const uint64_t max_workspace = workspace_bytes;
  prefer(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace, sizeof(max_workspace));
  const auto u32 = [](int v) { return static_cast<uint32_t>(v); };
  const uint32_t alignments[4] = {u32(w_align), u32(x_align), u32(out_align), u32(out_align)};
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &alignments[0], sizeof(uint32_t));
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &alignments[1], sizeof(uint32_t));
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &alignments[2], sizeof(uint32_t));
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &alignments[3], sizeof(uint32_t));
  // The bucket's algorithm where it applies to these rows within the workspace, else the
  // heuristic's for them (kept for the bucket).
  Key bucket = key;
  int64_t bucket_rows = 1;
  while (bucket_rows < rows) bucket_rows *= 2;
  std::get<1>(bucket) = bucket_rows;
  bool chosen = false;
  const auto known = bucket_algorithms_.find(bucket);
  if (status == CUBLAS_STATUS_SUCCESS && known != bucket_algorithms_.end()) {
    cublasLtMatmulHeuristicResult_t checked{};
    if (cublasLtMatmulAlgoCheck(handle_, plan->desc, plan->a, plan->b, plan->d, plan->d,
                                &known->second, &checked) == CUBLAS_STATUS_SUCCESS &&
        checked.workspaceSize <= workspace_bytes) {
      plan->algo = known->second;
      chosen = true;
    }
  }
  if (!chosen) {
    cublasLtMatmulHeuristicResult_t result{};
    int found_count = 0;
    ++heuristic_queries_;
    step([&] {
      return cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->a, plan->b, plan->d, plan->d,
                                            preference, 1, &result, &found_count);
    });
    if (status == CUBLAS_STATUS_SUCCESS && found_count > 0) {
      plan->algo = result.algo;
      bucket_algorithms_.emplace(bucket, result.algo);
      chosen = true;
    }
  }
  if (preference != nullptr) cublasLtMatmulPreferenceDestroy(preference);
  Entry entry;
  entry.last_use = ++uses_;
  if (status == CUBLAS_STATUS_SUCCESS && chosen) entry.plan = std::move(plan);
  return plans_.emplace(key, std::move(entry)).first->second.plan.get();
}

}  // namespace voxd::cuda
