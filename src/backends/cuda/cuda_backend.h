// The CUDA backend: every Backend kernel on one GPU, for F32, F16 and BF16 tensors (all floating
// operands of a call share one dtype; math accumulates in F32). Work is queued on the backend's
// own stream and runs asynchronously; synchronize() waits for it, and copies to the host wait
// by themselves. Linear layers and convolutions are cuBLAS gemms (convolutions through im2col /
// col2im columns); the other ops are the plain kernels in kernels.cu.
//
// Scratch memory (im2col columns, attention scores, uploaded lengths and ids) comes from the
// backend's own CudaDeviceAllocator for the duration of one call. One thread at a time may use
// a CudaBackend.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_allocator.h"
#include "core/backend.h"

namespace voxd {

class CudaBackend final : public Backend {
 public:
  // Opens device `index`; throws voxd::InputError when there is no such CUDA device ("no CUDA
  // device: cudaGetDeviceCount returned ...").
  explicit CudaBackend(int index = 0);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  // "cuda:<index>".
  std::string name() const override;
  Device device() const override { return Device::cuda(index_); }
  // Waits for the stream; throws voxd::Error for a failure in queued work.
  void synchronize() override;

  // Any strides and dtype in src, on this device or the host; dst contiguous, on this device or
  // the host. A copy to the host returns when the data is there.
  void copy(const Tensor& src, Tensor& dst) override;
  void fill(Tensor& dst, float value) override;
  // Kernels as documented in core/backend.h. Embedding ids may be on the host or this device.
  void unary(const Tensor& x, Tensor& out, UnaryOp op, float alpha) override;
  void binary(const Tensor& a, const Tensor& b, Tensor& out, BinaryOp op) override;
  void linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out) override;
  void conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out,
              const Conv1dParams& params) override;
  void conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out,
                        const ConvTranspose1dParams& params) override;
  void layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                  Tensor& out) override;
  void embedding(const Tensor& ids, const Tensor& table, Tensor& out) override;
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                 const AttentionParams& params) override;
  void zero_beyond_lengths(Tensor& x, const std::vector<int64_t>& lengths) override;
  void length_regulate(const Tensor& x, const std::vector<std::vector<int64_t>>& durations,
                       Tensor& out) override;
  void bucketize(const Tensor& x, const Tensor& boundaries, Tensor& out) override;

  // Stats of the allocator behind the backend's scratch memory.
  AllocatorStats scratch_stats() const { return scratch_.stats(); }

 private:
  struct Handles;  // stream and cuBLAS handle (CUDA types stay out of this header)

  int index_;
  CudaDeviceAllocator scratch_;
  std::unique_ptr<Handles> handles_;
};

}  // namespace voxd
