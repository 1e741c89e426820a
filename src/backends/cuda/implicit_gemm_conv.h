// conv1d as an implicit GEMM on tensor cores, for F16 and BF16 with F32 accumulation: each block
// computes a tile of output channels × 128 time steps of one sequence, loading the input
// channels' time window (with its halo of dilation·(K − 1) steps) into shared memory once per 16
// channels and multiplying it by every tap's weights from there (the weights rearranged first,
// per call or once when a model loads, so that blocks read them with 16-byte loads). No im2col
// columns are written, so the input is read once per tile instead of K times through global memory;
// the bias, and optionally a residual, are added in the epilogue, and a leaky ReLU can be applied
// to the input as it is loaded (HiFiGAN's resblocks: conv(leaky_relu(x)) + x in one pass). Internal
// to the CUDA backend.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>

#include "core/dtype.h"

namespace voxd::cuda {

struct ImplicitGemmConv {
  DType dtype = DType::F16;         // of weight and bias: F16 or BF16, the products' dtype
  DType input_dtype = DType::F16;   // of x: dtype or F32 (rounded to dtype as it is copied)
  DType output_dtype = DType::F16;  // of out and residual: dtype or F32
  const void* x = nullptr;          // [batch, in_channels, in_steps]
  const void* weight = nullptr;     // [out_channels, in_channels, kernel]
  // Scratch of implicit_gemm_arranged_weight_elements() elements, 16-byte aligned: the weights
  // rearranged per 16 input channels and tap, so blocks load them with wide reads.
  void* arranged_weight = nullptr;
  // arranged_weight already holds that arrangement (made once by implicit_gemm_arrange_weight or
  // implicit_gemm_arrange_polyphase), so the convolution does not arrange its weight first, and
  // the mma.sync kernel runs it (the wgmma kernel would write its own order there).
  bool weight_arranged = false;
  // Scratch of implicit_gemm_transposed_input_elements() elements, 16-byte aligned: the input
  // time-major, padded and zero-filled, so blocks copy their windows with wide reads.
  void* transposed_input = nullptr;
  const void* bias = nullptr;      // [out_channels] or null
  const void* residual = nullptr;  // [batch, out_channels, out_steps] added to out, or null
  // The mma.sync kernel only (the wgmma kernel takes none of them): after the residual, + addend
  // (as the residual, or null), × output_scale, then leaky ReLU with output_slope where
  // output_leaky_relu.
  const void* addend = nullptr;
  float output_scale = 1.0f;
  bool output_leaky_relu = false;
  float output_slope = 0.0f;
  void* out = nullptr;  // [batch, out_channels, out_steps]; may not alias x
  int64_t batch = 0;
  int64_t in_channels = 0;
  int64_t in_steps = 0;
  int64_t out_channels = 0;
  int64_t out_steps = 0;
  int64_t kernel = 0;
  int64_t padding = 0;
  int64_t dilation = 1;
  // The input goes through leaky_relu with this slope as it is loaded, when set.
  bool input_leaky_relu = false;
  float input_slope = 0.0f;
  // Whether Hopper's wgmma kernel (wgmma_conv.h) runs it where it applies; otherwise the
  // mma.sync kernel does.
  bool allow_wgmma = false;
  // The first of a pair only: x is time-major [batch][in_steps][in_channels] in the weights'
  // dtype, in_channels a multiple of 16 and x 16-byte aligned. The kernel copies its windows
  // straight from x (zeros outside the sequence) and applies the input's leaky ReLU in shared
  // memory; transposed_input is not used.
  bool time_major_input = false;
  // The second of a pair only: out and residual are time-major [batch][out_steps][out_channels]
  // in the weights' dtype, out_channels a multiple of 8.
  bool time_major_output = false;
};

// Two convolutions of one length in a row (core/backend.h's Conv1dPair) through the mma.sync
// kernel: the first writes its output, leaky ReLU applied and rounded to the weights' dtype,
// straight into the second's time-major input (second.transposed_input), so the second needs no
// transpose and the intermediate is never written channel-major. first.out and second.x are
// not used; second.input_leaky_relu is what the first applies on the way out. Both must keep
// the length (2·padding = dilation·(kernel − 1)) and share dtype, arranged_weight may be one
// buffer (the second's weights are arranged after the first has run), the transposed inputs are
// two.
// With first.time_major_input and second.time_major_output the pair reads and writes time-major
// rows and transposes nothing; where both weights came arranged and implicit_gemm_pair_on_chip()
// takes the shapes, it runs as one kernel whose intermediate stays in shared memory.
void implicit_gemm_conv1d_pair(const ImplicitGemmConv& first, const ImplicitGemmConv& second,
                               cudaStream_t stream, const char* op);

// Whether implicit_gemm_conv1d_pair() runs a pair of these shapes in one kernel that keeps the
// intermediate on chip, where the first reads time-major rows, the second writes them and both
// weights came arranged: C → C → C channels for C of 32 or 64, the first's halo
// (K − 1)·dilation at most 128 and the second's at most 64. It then takes no
// second.transposed_input (nor first.transposed_input, x being 16-byte aligned).
bool implicit_gemm_pair_on_chip(int64_t in_channels, int64_t channels, int64_t out_channels,
                                int64_t first_kernel, int64_t first_dilation, int64_t second_kernel,
                                int64_t second_dilation);
// Whether implicit_gemm_conv1d() runs this convolution: stride 1, no groups, F16 or BF16, and a
// kernel and halo that fit its shared memory.
bool implicit_gemm_conv1d_supported(DType dtype, int64_t kernel, int64_t dilation, int64_t stride,
                                    int64_t groups);
// Whether implicit_gemm_conv1d() gives every multiprocessor of the current device a block of 64
// output channels × 128 steps for an output of this size.
bool implicit_gemm_fills_device(int64_t batch, int64_t out_channels, int64_t out_steps);
// Elements of ImplicitGemmConv::arranged_weight.
int64_t implicit_gemm_arranged_weight_elements(int64_t out_channels, int64_t in_channels,
                                               int64_t kernel);
// Queues a.arranged_weight = a.weight in the mma.sync kernel's order (a.dtype, a.out_channels,
// a.in_channels and a.kernel say the weight's shape), for convolutions with weight_arranged.
void implicit_gemm_arrange_weight(const ImplicitGemmConv& a, cudaStream_t stream, const char* op);
// Elements of ImplicitGemmConv::transposed_input.
int64_t implicit_gemm_transposed_input_elements(int64_t batch, int64_t in_channels,
                                                int64_t out_steps, int64_t kernel,
                                                int64_t dilation);
// Queues the convolution on `stream`; throws voxd::Error naming `op` when the launch fails.
void implicit_gemm_conv1d(const ImplicitGemmConv& args, cudaStream_t stream, const char* op);

// A transposed convolution (stride s, K taps, padding p; dilation 1, one group, no output
// padding) whose output is s times its input (K − 2·p = s), as one stride-1 convolution of its s
// phases over the same input: output step τ·s + r, channel co, is channel r·Cout + co of that
// convolution's step τ, so its time-major rows [B, T, s·Cout] are the output's [B, s·T, Cout].
// Phase r's taps are k = k_r + m·s (k_r = (r + p) mod s, m = 0, 1, ... while k < K) at input
// steps τ + d_r − m (d_r = (r + p) div s); the convolution's window spans every phase's offsets,
// `taps` steps from −window_padding, with zero weights where a phase has no tap.
struct Polyphase {
  int64_t stride = 1;
  int64_t kernel = 1;
  int64_t padding = 0;
  int64_t taps = 1;
  int64_t window_padding = 0;
};
// The polyphase form of a transposed convolution, or nullopt where its output is not exactly
// `stride` times its input or it dilates, pads its output or has groups.
std::optional<Polyphase> polyphase_of(int64_t stride, int64_t kernel, int64_t padding,
                                      int64_t dilation, int64_t output_padding, int64_t groups);
// Whether implicit_gemm_conv_transpose1d_rows() runs it: F16 or BF16, input channels a multiple
// of 16, s·Cout a multiple of 8, and a window the mma.sync kernel takes.
bool implicit_gemm_conv_transpose1d_rows_supported(DType dtype, int64_t in_channels,
                                                   int64_t out_channels,
                                                   const Polyphase& polyphase);
// Elements of ImplicitGemmConv::arranged_weight it needs: the polyphase weights arranged, then the
// bias once per phase.
int64_t implicit_gemm_polyphase_elements(int64_t in_channels, int64_t out_channels,
                                         const Polyphase& polyphase);
// Queues a.arranged_weight (implicit_gemm_polyphase_elements()) = the phase weights of a.weight
// [Cin, Cout, K] (a.in_channels, a.out_channels = Cout) and the bias a.bias once per phase (where
// not null), in the order implicit_gemm_conv_transpose1d_rows reads them.
void implicit_gemm_arrange_polyphase(const ImplicitGemmConv& a, const Polyphase& polyphase,
                                     cudaStream_t stream, const char* op);
// Queues the transposed convolution over time-major rows through the mma.sync kernel: a.x [B, T,
// Cin] (16-byte aligned) into a.out [B, T, s·Cout] = [B, s·T, Cout], in the weights' dtype, with
// a.weight the transposed convolution's [Cin, Cout, K], a.bias its [Cout] (or null),
// a.arranged_weight of implicit_gemm_polyphase_elements() (arranged first unless
// a.weight_arranged); a.out_channels is Cout, a.in_steps T.
void implicit_gemm_conv_transpose1d_rows(const ImplicitGemmConv& a, const Polyphase& polyphase,
                                         cudaStream_t stream, const char* op);

}  // namespace voxd::cuda
