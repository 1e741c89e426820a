// cuDNN for the CUDA backend's 1-D convolutions: conv1d as cudnnConvolutionForward and
// conv_transpose1d as cudnnConvolutionBackwardData (a transposed convolution is the gradient of
// a convolution with respect to its input), on [B, C, 1, T] views of [B, C, T] tensors. cuDNN's
// implicit-GEMM kernels read the input once instead of writing and reading im2col columns.
// Descriptors are made once per shape, and the algorithm is timed once per shape bucket (see
// prepare()); every algorithm kept fits kWorkspaceBytes, so a workspace plan counts the same
// fixed workspace on machines without a GPU. Results accumulate onto `out` (beta 1), which
// holds the bias. Internal to the CUDA backend; one thread at a time.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "core/dtype.h"

namespace voxd::cuda {

struct ConvolutionShape {
  DType dtype = DType::F32;
  bool transposed = false;
  int64_t batch = 0;
  int64_t in_channels = 0;  // x's channels
  int64_t in_steps = 0;     // x's time steps
  int64_t out_channels = 0;
  int64_t out_steps = 0;
  int64_t kernel = 0;
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;

  auto key() const {
    return std::tuple(dtype, transposed, batch, in_channels, in_steps, out_channels, out_steps,
                      kernel, stride, padding, dilation, groups);
  }
  bool operator<(const ConvolutionShape& other) const { return key() < other.key(); }
};

class CudnnConvolutions {
 public:
  // Workspace every cuDNN convolution takes from its scratch, whatever its algorithm needs.
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;

  // A cuDNN handle on the current device, queuing work on `stream`.
  explicit CudnnConvolutions(cudaStream_t stream);
  ~CudnnConvolutions();
  CudnnConvolutions(const CudnnConvolutions&) = delete;
  CudnnConvolutions& operator=(const CudnnConvolutions&) = delete;

  // Chooses the algorithm for `shape` unless one was chosen for its bucket (the same shape with
  // its time steps rounded up to a power of two): the fastest deterministic one within
  // kWorkspaceBytes, timed by cuDNN on these buffers (which overwrites `out`), or ranked by
  // cuDNN's heuristics while the stream records a graph. Arguments as run(). Throws voxd::Error
  // naming `op` when cuDNN has none.
  void prepare(const ConvolutionShape& shape, const void* x, const void* weight, void* out,
               void* workspace, const char* op);
  // out [B, out_channels, out_steps] += the convolution of x [B, in_channels, in_steps] with
  // `weight` (conv1d: [out_channels, in_channels/groups, K]; transposed:
  // [in_channels, out_channels/groups, K]), all contiguous in shape.dtype, on the stream, with
  // the algorithm prepare() chose. `workspace` holds kWorkspaceBytes. Throws voxd::Error naming
  // `op` when a call fails.
  void run(const ConvolutionShape& shape, const void* x, const void* weight, void* out,
           void* workspace, const char* op);

 private:
  struct Plan;
  struct AlgorithmKey;
  struct Algorithm;
  // The descriptors of `shape`, made on first use.
  const Plan& plan(const ConvolutionShape& shape, const char* op);
  // `steps` rounded up to a power of two.
  static int64_t bucket(int64_t steps);

  struct Handle;
  std::unique_ptr<Handle> handle_;
  cudaStream_t stream_;
  std::map<ConvolutionShape, std::unique_ptr<Plan>> plans_;
  std::map<AlgorithmKey, Algorithm> algorithms_;
};

}  // namespace voxd::cuda
