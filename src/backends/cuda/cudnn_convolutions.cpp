#include "backends/cuda/cudnn_convolutions.h"

#include <cudnn.h>

#include <climits>
#include <string>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "core/error.h"

namespace voxd::cuda {
namespace {

void check_cudnn(cudnnStatus_t status, const char* call, const char* op) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  throw Error(std::string("cuda: ") + op + ": " + call + " failed: " + cudnnGetErrorString(status));
}

#define VOXD_CUDNN_CHECK(op, call) check_cudnn((call), #call, (op))

int dimension(int64_t value, const char* what, const char* op) {
  if (value > INT_MAX) {
    throw Error(std::string("cuda: ") + op + ": " + what + " " + std::to_string(value) +
                " exceeds cuDNN's int");
  }
  return static_cast<int>(value);
}

cudnnDataType_t cudnn_type(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return CUDNN_DATA_FLOAT;
    case DType::F16:
      return CUDNN_DATA_HALF;
    case DType::BF16:
      return CUDNN_DATA_BFLOAT16;
    default:
      throw Error("cuda: cuDNN convolutions take F32, F16 or BF16, not " +
                  std::string(dtype_name(dtype)));
  }
}

}  // namespace

struct CudnnConvolutions::Handle {
  cudnnHandle_t cudnn = nullptr;
  ~Handle() {
    if (cudnn) cudnnDestroy(cudnn);
  }
};

// The descriptors of one shape and the algorithm chosen for it.
struct CudnnConvolutions::Plan {
  cudnnTensorDescriptor_t x = nullptr;  // the convolution's input: out for a transposed one
  cudnnTensorDescriptor_t y = nullptr;  // the convolution's output: x for a transposed one
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;

  ~Plan() {
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (x) cudnnDestroyTensorDescriptor(x);
  }
};

// What an algorithm is chosen for: the shape, with its time steps replaced by their bucket.
struct CudnnConvolutions::AlgorithmKey {
  ConvolutionShape shape;
  int64_t steps_bucket = 0;
  auto key() const {
    ConvolutionShape s = shape;
    s.in_steps = s.out_steps = 0;
    return std::tuple(s.key(), steps_bucket);
  }
  bool operator<(const AlgorithmKey& other) const { return key() < other.key(); }
};

struct CudnnConvolutions::Algorithm {
  cudnnConvolutionFwdAlgo_t forward{};
  cudnnConvolutionBwdDataAlgo_t backward{};
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

int64_t CudnnConvolutions::bucket(int64_t steps) {
  int64_t b = 1;
  while (b < steps) b *= 2;
  return b;
}

CudnnConvolutions::CudnnConvolutions(cudaStream_t stream)
    : handle_(std::make_unique<Handle>()), stream_(stream) {
  VOXD_CUDNN_CHECK("open", cudnnCreate(&handle_->cudnn));
  VOXD_CUDNN_CHECK("open", cudnnSetStream(handle_->cudnn, stream));
}

CudnnConvolutions::~CudnnConvolutions() = default;

const CudnnConvolutions::Plan& CudnnConvolutions::plan(const ConvolutionShape& s, const char* op) {
  auto found = plans_.find(s);
  if (found != plans_.end()) return *found->second;
  auto plan = std::make_unique<Plan>();
  const cudnnDataType_t type = cudnn_type(s.dtype);
  // A convolution from (conv_channels, conv_steps) to (result_channels, result_steps); the
  // transposed convolution runs one from its output to its input backwards.
  const int64_t conv_channels = s.transposed ? s.out_channels : s.in_channels;
  const int64_t conv_steps = s.transposed ? s.out_steps : s.in_steps;
  const int64_t result_channels = s.transposed ? s.in_channels : s.out_channels;
  const int64_t result_steps = s.transposed ? s.in_steps : s.out_steps;
  const int batch = dimension(s.batch, "batch", op);
  VOXD_CUDNN_CHECK(op, cudnnCreateTensorDescriptor(&plan->x));
  VOXD_CUDNN_CHECK(op, cudnnSetTensor4dDescriptor(plan->x, CUDNN_TENSOR_NCHW, type, batch,
                                                  dimension(conv_channels, "channels", op), 1,
                                                  dimension(conv_steps, "steps", op)));
  VOXD_CUDNN_CHECK(op, cudnnCreateTensorDescriptor(&plan->y));
  VOXD_CUDNN_CHECK(op, cudnnSetTensor4dDescriptor(plan->y, CUDNN_TENSOR_NCHW, type, batch,
                                                  dimension(result_channels, "channels", op), 1,
                                                  dimension(result_steps, "steps", op)));
  VOXD_CUDNN_CHECK(op, cudnnCreateFilterDescriptor(&plan->w));
  VOXD_CUDNN_CHECK(
      op, cudnnSetFilter4dDescriptor(plan->w, type, CUDNN_TENSOR_NCHW,
                                     dimension(result_channels, "channels", op),
                                     dimension(conv_channels / s.groups, "channels per group", op),
                                     1, dimension(s.kernel, "kernel", op)));
  VOXD_CUDNN_CHECK(op, cudnnCreateConvolutionDescriptor(&plan->conv));
  VOXD_CUDNN_CHECK(
      op, cudnnSetConvolution2dDescriptor(plan->conv, 0, dimension(s.padding, "padding", op), 1,
                                          dimension(s.stride, "stride", op), 1,
                                          dimension(s.dilation, "dilation", op),
                                          CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  VOXD_CUDNN_CHECK(op,
                   cudnnSetConvolutionGroupCount(plan->conv, dimension(s.groups, "groups", op)));
  // F32 stays F32 (FMA only: no TF32); the half dtypes may use tensor cores.
  VOXD_CUDNN_CHECK(op,
                   cudnnSetConvolutionMathType(
                       plan->conv, s.dtype == DType::F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));

  return *plans_.emplace(s, std::move(plan)).first->second;
}

void CudnnConvolutions::prepare(const ConvolutionShape& shape, const void* x, const void* weight,
                                void* out, void* workspace, const char* op) {
  const Plan& p = plan(shape, op);
  const AlgorithmKey key{shape, bucket(shape.transposed ? shape.out_steps : shape.in_steps)};
  if (algorithms_.count(key) != 0) return;
  // F32 takes FMA algorithms only (no TF32: the 1e-4 parity with the reference depends on it);
  // the half dtypes any, on tensor cores or not. Deterministic only, so that a replayed graph
  // and an eager run give the same audio.
  const auto usable = [&](const auto& r) {
    return r.status == CUDNN_STATUS_SUCCESS && r.memory <= kWorkspaceBytes &&
           r.determinism == CUDNN_DETERMINISTIC &&
           (shape.dtype != DType::F32 || r.mathType == CUDNN_FMA_MATH);
  };
  // Timed by cuDNN on this shape when the stream may wait (it writes `out`), else ranked by its
  // heuristics (while a graph is being recorded).
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  VOXD_CUDA_CHECK(op, cudaStreamIsCapturing(stream_, &capturing));
  const bool timed = capturing == cudaStreamCaptureStatusNone;
  int returned = 0;
  Algorithm chosen;
  bool found = false;
  if (shape.transposed) {
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> ranked(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
    const int requested = static_cast<int>(ranked.size());
    if (timed) {
      VOXD_CUDNN_CHECK(op, cudnnFindConvolutionBackwardDataAlgorithmEx(
                               handle_->cudnn, p.w, weight, p.y, x, p.conv, p.x, out, requested,
                               &returned, ranked.data(), workspace, kWorkspaceBytes));
    } else {
      VOXD_CUDNN_CHECK(
          op, cudnnGetConvolutionBackwardDataAlgorithm_v7(handle_->cudnn, p.w, p.y, p.conv, p.x,
                                                          requested, &returned, ranked.data()));
    }
    for (int i = 0; i < returned && !found; ++i) {
      const auto& r = ranked[static_cast<size_t>(i)];
      if (usable(r)) {
        chosen = {cudnnConvolutionFwdAlgo_t{}, r.algo, r.mathType};
        found = true;
      }
    }
  } else {
    std::vector<cudnnConvolutionFwdAlgoPerf_t> ranked(CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
    const int requested = static_cast<int>(ranked.size());
    if (timed) {
      VOXD_CUDNN_CHECK(op, cudnnFindConvolutionForwardAlgorithmEx(
                               handle_->cudnn, p.x, x, p.w, weight, p.conv, p.y, out, requested,
                               &returned, ranked.data(), workspace, kWorkspaceBytes));
    } else {
      VOXD_CUDNN_CHECK(op,
                       cudnnGetConvolutionForwardAlgorithm_v7(handle_->cudnn, p.x, p.w, p.conv, p.y,
                                                              requested, &returned, ranked.data()));
    }
    for (int i = 0; i < returned && !found; ++i) {
      const auto& r = ranked[static_cast<size_t>(i)];
      if (usable(r)) {
        chosen = {r.algo, cudnnConvolutionBwdDataAlgo_t{}, r.mathType};
        found = true;
      }
    }
  }
  if (!found) {
    throw Error(std::string("cuda: ") + op + ": cuDNN has no deterministic algorithm within " +
                std::to_string(kWorkspaceBytes >> 20) + " MiB of workspace for " +
                std::string(dtype_name(shape.dtype)) + " x [" + std::to_string(shape.batch) + ", " +
                std::to_string(shape.in_channels) + ", " + std::to_string(shape.in_steps) +
                "] with kernel " + std::to_string(shape.kernel) + "; set VOXD_CUDA_CONV=im2col");
  }
  algorithms_.emplace(key, chosen);
}

void CudnnConvolutions::run(const ConvolutionShape& shape, const void* x, const void* weight,
                            void* out, void* workspace, const char* op) {
  const Plan& p = plan(shape, op);
  const auto found =
      algorithms_.find({shape, bucket(shape.transposed ? shape.out_steps : shape.in_steps)});
  if (found == algorithms_.end()) {
    throw Error(std::string("cuda: ") + op + ": no cuDNN algorithm chosen (prepare() first)");
  }
  const Algorithm& a = found->second;
  VOXD_CUDNN_CHECK(op, cudnnSetConvolutionMathType(p.conv, a.math));
  const float alpha = 1.0f;
  const float beta = 1.0f;
  if (shape.transposed) {
    VOXD_CUDNN_CHECK(
        op, cudnnConvolutionBackwardData(handle_->cudnn, &alpha, p.w, weight, p.y, x, p.conv,
                                         a.backward, workspace, kWorkspaceBytes, &beta, p.x, out));
  } else {
    VOXD_CUDNN_CHECK(
        op, cudnnConvolutionForward(handle_->cudnn, &alpha, p.x, x, p.w, weight, p.conv, a.forward,
                                    workspace, kWorkspaceBytes, &beta, p.y, out));
  }
}

}  // namespace voxd::cuda
