// The operations models are written in. Each function checks its inputs' shapes (throwing
// voxd::Error with the op name and the shapes it got), allocates its output from the context's
// allocator on the backend's device, and runs the backend's kernel (in a planning context: only
// allocates, see Context). Strided inputs are made
// contiguous first where a kernel needs it. Models call only these, never a backend directly,
// so the same model code runs on every backend.
#pragma once

#include <cstdint>
#include <vector>

#include "core/allocator.h"
#include "core/backend.h"
#include "core/kernel_scratch.h"
#include "core/tensor.h"

namespace voxd {

// What one forward pass runs on: a backend and the allocator its activations and kernel scratch
// come from. A planning context runs the same model code without computing: every op checks its
// inputs and allocates its output and its kernel's scratch as in a run, but no kernel runs, no
// element is read, and a copy to the host yields zeros. Over a planning WorkspaceArena that
// measures the memory a step needs before it runs.
class Context {
 public:
  Context(Backend& backend, Allocator& allocator) : backend_(&backend), allocator_(&allocator) {}
  // A planning context; tensors from `allocator` may then have fake addresses.
  static Context for_planning(Backend& backend, Allocator& allocator) {
    Context ctx(backend, allocator);
    ctx.planning_ = true;
    return ctx;
  }
  Backend& backend() const { return *backend_; }
  Allocator& allocator() const { return *allocator_; }
  Device device() const { return backend_->device(); }
  bool planning() const { return planning_; }
  // What kernels that need temporary memory receive: the allocator and the mode.
  KernelScratch scratch() const { return KernelScratch(*allocator_, planning_); }

 private:
  Backend* backend_;
  Allocator* allocator_;
  bool planning_ = false;
};

namespace ops {

// A new tensor on the context's device; elements uninitialised.
Tensor empty(Context& ctx, const Shape& shape, DType dtype = DType::F32);
Tensor zeros(Context& ctx, const Shape& shape, DType dtype = DType::F32);
// Contiguous copy on the context's device in `dtype` (from the host or the device).
Tensor to_device(Context& ctx, const Tensor& x, DType dtype = DType::F32);
// Contiguous copy on the host in `dtype` (zeros in a planning context).
Tensor to_host(Context& ctx, const Tensor& x, DType dtype = DType::F32);
// x itself when already contiguous, else a contiguous copy.
Tensor contiguous(Context& ctx, const Tensor& x);

Tensor relu(Context& ctx, const Tensor& x);
Tensor leaky_relu(Context& ctx, const Tensor& x, float slope);
Tensor tanh(Context& ctx, const Tensor& x);
Tensor exp(Context& ctx, const Tensor& x);
Tensor scale(Context& ctx, const Tensor& x, float factor);
// In-place variants: x (contiguous) is overwritten and returned.
Tensor& relu_(Context& ctx, Tensor& x);
Tensor& leaky_relu_(Context& ctx, Tensor& x, float slope);

// a + b, a · b with b broadcast to a's shape (see Backend::binary); b may also have fewer
// dimensions than a, which counts as leading sizes of 1 (b [C] against a [B, T, C]).
Tensor add(Context& ctx, const Tensor& a, const Tensor& b);
Tensor mul(Context& ctx, const Tensor& a, const Tensor& b);
// a += b in place (a contiguous); returns a.
Tensor& add_(Context& ctx, Tensor& a, const Tensor& b);

// x [..., in] -> [..., out].
Tensor linear(Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias);
Tensor conv1d(Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias,
              const Conv1dParams& params);
// conv1d(leaky_relu(x, slope) or x) + bias + residual, as `fusion` says (ConvFusion: x may be of
// another dtype than weight and bias, the output of output_dtype), in one kernel where the
// backend fuses it (Backend::fuses_conv1d), else step by step: leaky_relu in x's dtype, a
// conversion to the weights' dtype, conv1d, a conversion to the output dtype, + residual.
Tensor conv1d(Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias,
              const Conv1dParams& params, const ConvFusion& fusion);
Tensor conv_transpose1d(Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const ConvTranspose1dParams& params);
// Over the last dimension of x [..., C].
Tensor layer_norm(Context& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                  float eps);
// ids [B, T] -> [B, T, C] (ids of any rank work: ids.shape + [C]). ids may be on the host.
Tensor embedding(Context& ctx, const Tensor& ids, const Tensor& table);
// See Backend::attention; each key length must lie in [0, Tk].
Tensor attention(Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                 const AttentionParams& params);
// x [B, T, C] (contiguous): rows past each length zeroed in place; returns x.
Tensor& zero_beyond_lengths(Context& ctx, Tensor& x, const std::vector<int64_t>& lengths);
// Output has max(sum of durations over each batch, min_frames) rows. durations[b] may be shorter
// than T (a batch's padded rows); missing durations count as 0.
Tensor length_regulate(Context& ctx, const Tensor& x,
                       const std::vector<std::vector<int64_t>>& durations, int64_t min_frames = 0);
Tensor bucketize(Context& ctx, const Tensor& x, const Tensor& boundaries);
// Swaps two dimensions and returns a contiguous result.
Tensor transpose(Context& ctx, const Tensor& x, int64_t d0, int64_t d1);

}  // namespace ops
}  // namespace voxd
