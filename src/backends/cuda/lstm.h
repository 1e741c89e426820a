// Backend::lstm on the device: one launch per time step, each warp computing one hidden unit's
// four gates (rows of w_hh read whole, the previous h from shared memory, F32 sums) and its cell
// update for one batch item. h ping-pongs between the caller's state and a scratch copy so that a
// step reads the previous step's h while it writes its own. Internal to the CUDA backend.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace voxd::cuda {

struct LstmLayer {
  const void* x_gates = nullptr;     // [batch, steps, 4·hidden] in dtype
  const void* w_hh = nullptr;        // [4·hidden, hidden] in dtype
  float* h = nullptr;                // [batch, hidden], the state in and out
  float* h_scratch = nullptr;        // [batch, hidden]
  float* c = nullptr;                // [batch, hidden], in place
  void* out = nullptr;               // [batch, steps, hidden] in dtype, zeroed here first
  const int64_t* lengths = nullptr;  // [batch], device memory
  DType dtype = DType::F32;
  int64_t batch = 0;
  int64_t steps = 0;
  int64_t hidden = 0;
  int64_t longest = 0;  // the largest length
  bool reverse = false;
};

void lstm(const LstmLayer& layer, cudaStream_t stream, const char* op);

}  // namespace voxd::cuda
