// Helpers models use to take parameters from a WeightSource onto the compute device, checking
// each tensor's shape against what the model's configuration expects, and the precision policy
// that decides, from the weights' dtype, which dtype each parameter and activation has.
#pragma once

#include <string>

#include "core/ops.h"
#include "core/weights.h"

namespace voxd {

// Which dtype a model's tensors have, chosen at load time from the dtype the weights were asked
// in (PyTorch autocast's split for bfloat16):
//   compute  matrix work: linear, conv1d, conv_transpose1d and attention, their weights, inputs
//            and outputs (the backend accumulates in F32 and rounds the output once);
//   stream   everything else: the residual stream and the sums carried between layers, layer
//            norms and their parameters, embedding and position tables, element-wise ops, the
//            models' final outputs, and a few small matrix layers whose rounding would reach an
//            output undiluted: the variance predictors' output heads (what bucketize and the
//            duration rounding read) and HiFiGAN's edge convs (conv_pre, conv_post).
// F32 and F16 run in one dtype (stream == compute, so no cast is ever made). BF16 keeps 8
// mantissa bits, too few for sums carried across layers or for values compared with bin
// boundaries, so under BF16 the stream is F32.
struct PrecisionPolicy {
  DType compute = DType::F32;
  DType stream = DType::F32;

  // The policy for weights loaded in `dtype` (a floating dtype).
  static PrecisionPolicy for_weights(DType dtype);
  // x in the compute dtype: x itself when it has it, else a contiguous copy on ctx's device.
  Tensor to_compute(Context& ctx, const Tensor& x) const;
  // x in the stream dtype: x itself when it has it, else a contiguous copy on ctx's device.
  Tensor to_stream(Context& ctx, const Tensor& x) const;
};

// The tensor `name` from `source`, checked to have `expected` shape, converted to `dtype` on
// ctx's device. Throws voxd::Error naming the source, the tensor, the expected and the found
// shape ("... tensor 'conv_pre.weight' has shape [512, 80, 7], the config expects [256, 80, 7]").
Tensor load_parameter(Context& ctx, const WeightSource& source, const std::string& name,
                      const Shape& expected, DType dtype = DType::F32);

// The shape of `name`, which must exist and have `rank` dimensions (for sizes a model takes from
// its weights: vocabularies, table rows). Throws voxd::Error naming the source, the tensor, its
// shape and `expected` ("[n_symbols, hidden]").
Shape parameter_shape(const WeightSource& source, const std::string& name, int64_t rank,
                      const std::string& expected);

// Host copy of `name` as F32, shape-checked the same way; for loaders that transform weights
// (weight-norm folding, batch-norm folding) before moving them to the device.
Tensor load_host_parameter(const WeightSource& source, const std::string& name,
                           const Shape& expected);

// The folded weight of the weight-normed layer `prefix` (torch.nn.utils.weight_norm, dim 0), as
// a host F32 tensor of `shape`: weight_g [shape[0], 1, 1] and weight_v `shape` folded to
// g · v / ‖v‖ with the norm over all dims but the first (in double); or `prefix`.weight when the
// checkpoint holds folded weights. For a transposed conv (weight [in, out, k]) the norm is per
// input channel. Missing or misshapen tensors throw voxd::Error naming them.
Tensor load_weight_norm_parameter(const WeightSource& source, const std::string& prefix,
                                  const Shape& shape);

}  // namespace voxd
