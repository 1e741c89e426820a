#include "core/backend.h"

#include "core/error.h"

namespace voxd {

void Backend::fused_conv1d(const Tensor& /*x*/, const Tensor& /*weight*/, const Tensor& /*bias*/,
                           const ConvFusion& /*fusion*/, Tensor& /*out*/,
                           const Conv1dParams& /*params*/, const KernelScratch& /*scratch*/) {
  throw Error(name() + ": fused_conv1d called although fuses_conv1d() is false");
}

}  // namespace voxd
