// Helpers models use to take parameters from a WeightSource onto the compute device, checking
// each tensor's shape against what the model's configuration expects.
#pragma once

#include <string>

#include "core/ops.h"
#include "core/weights.h"

namespace voxd {

// The tensor `name` from `source`, checked to have `expected` shape, converted to `dtype` on
// ctx's device. Throws voxd::Error naming the source, the tensor, the expected and the found
// shape ("... tensor 'conv_pre.weight' has shape [512, 80, 7], the config expects [256, 80, 7]").
Tensor load_parameter(Context& ctx, const WeightSource& source, const std::string& name,
                      const Shape& expected, DType dtype = DType::F32);

// Host copy of `name` as F32, shape-checked the same way; for loaders that transform weights
// (weight-norm folding, batch-norm folding) before moving them to the device.
Tensor load_host_parameter(const WeightSource& source, const std::string& name,
                           const Shape& expected);

}  // namespace voxd
