#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <string>

#include "backends/cuda/conv_epilogue.cuh"
#include "backends/cuda/conv_weights.cuh"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device_types.cuh"
#include "backends/cuda/wgmma_conv.h"

namespace voxd::cuda {
namespace {

// The GEMM: M = output channels (64 per consumer warpgroup), N = kTileSteps output steps of one
// sequence, K = input channels × taps. A stage holds `groups` groups of 8 input channels:
// - the window, a column per group of rows × 16 bytes (row r is the time-major input's row
//   t0 + r; the input is group-major, so a column is contiguous there too), copied kBoxRows rows
//   at a time; tap k's B operand is that column from row k·dilation on, so the input comes into
//   shared memory once for every tap;
// - the weights, per group [tap][output channel][8 channels], one copy.
// Both are wgmma's K-major layout without swizzle: a core matrix is 8 rows × 16 contiguous bytes,
// the next along K is the next group's (the descriptor's leading byte offset: a column, or a
// group's weights), the next along M or N is 8 rows on (the stride byte offset, 128 bytes). Any
// row can start a B operand, which is what the shifted taps need.
constexpr int kTileSteps = 256;
constexpr int kWarpgroupChannels = 64;
constexpr int kWarpgroupThreads = 128;
constexpr int kBoxRows = 64;
constexpr int kGroupChannels = 8;
constexpr int kGroupBytes = kGroupChannels * 2;
constexpr int kMaxStages = 8;
constexpr int64_t kSharedBytes = 227 << 10;  // a block's most on sm_90, static and dynamic
constexpr int kAlign = 128;                  // of a TMA copy's destination
// What a block's stages may take: the rest holds the full and empty barriers (static) and the
// slack that aligns the dynamic part to kAlign.
constexpr int64_t kStageSpace = kSharedBytes - 2 * kMaxStages * 8 - kAlign;

// The kernels are built for these tap counts (HiFiGAN's resblocks and first convolution), each
// with its taps and a stage's channel groups known at compile time: a wgmma loop with a run-time
// trip count makes ptxas fence every wgmma (its warning C7519).
bool built_for_taps(int64_t kernel) {
  return kernel == 3 || kernel == 5 || kernel == 7 || kernel == 11;
}

// Channel groups of 8 per stage: 4 for short kernels, else 2 (a stage's weights grow with the
// taps).
__host__ __device__ constexpr int groups_for_taps(int64_t kernel) {
  return kernel <= 5 ? 4 : 2;
}

// How one convolution is cut into pipeline stages (its taps, and so the channel groups of a
// stage, are the kernel's template parameter).
struct WgmmaPlan {
  int stages = 0;              // shared-memory stages in flight
  int channel_stages = 0;      // stages over all the input channels
  int boxes = 0;               // window copies of kBoxRows rows per group
  int column_bytes = 0;        // one group's window column
  int weight_group_bytes = 0;  // one group's weights, every tap
  int stage_bytes = 0;         // also the bytes the copies of a stage bring
  int dilation = 0;
};

int block_channels_for(int64_t out_channels) {
  return out_channels > kWarpgroupChannels ? 2 * kWarpgroupChannels : kWarpgroupChannels;
}

// As many stages as fit shared memory, up to kMaxStages; stages < 2 when not even two fit.
WgmmaPlan plan_for(const ImplicitGemmConv& a, int64_t channels, int block_channels) {
  WgmmaPlan p;
  const int64_t halo = (a.kernel - 1) * a.dilation;
  const int64_t boxes = (kTileSteps + halo + kBoxRows - 1) / kBoxRows;
  const int64_t column = boxes * kBoxRows * kGroupBytes;
  const int64_t weights = a.kernel * block_channels * kGroupBytes;
  const int64_t groups_total = channels / kGroupChannels;
  const int64_t groups = groups_for_taps(a.kernel);
  const int64_t stage = groups * (column + weights);
  p.stages = static_cast<int>(std::min<int64_t>(kMaxStages, kStageSpace / stage));
  p.channel_stages = static_cast<int>((groups_total + groups - 1) / groups);
  p.boxes = static_cast<int>(boxes);
  p.column_bytes = static_cast<int>(column);
  p.weight_group_bytes = static_cast<int>(weights);
  p.stage_bytes = static_cast<int>(stage);
  p.dilation = static_cast<int>(a.dilation);
  return p;
}

// The device code exists only in the sm_90a pass: the portable PTX has none of it.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

constexpr int kAccumulators = kTileSteps / 2;  // per thread: 64 × 256 F32 over 128 threads

// mbarrier: a transaction barrier in shared memory that the TMA copies complete.
__device__ __forceinline__ void barrier_init(uint32_t barrier, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(barrier), "r"(count));
}
__device__ __forceinline__ void barrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void barrier_expect_bytes(uint32_t barrier, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(barrier), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void barrier_arrive(uint32_t barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(barrier) : "memory");
}
__device__ __forceinline__ void barrier_wait(uint32_t barrier, int parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(barrier), "r"(parity)
        : "memory");
  } while (done == 0);
}

// One box of a rank-4 tensor map into shared memory, completing on `barrier`.
__device__ __forceinline__ void tma_load(uint32_t destination, const CUtensorMap* map, int c0,
                                         int c1, int c2, int c3, uint32_t barrier) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], "
      "[%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(destination),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(barrier)
      : "memory");
}

// A shared-memory matrix descriptor for the no-swizzle K-major layout.
__device__ __forceinline__ uint64_t descriptor(uint32_t address, uint32_t leading_bytes) {
  constexpr uint64_t kStrideBytes = 8 * kGroupBytes;
  return static_cast<uint64_t>((address & 0x3FFFF) >> 4) |
         (static_cast<uint64_t>(leading_bytes >> 4) << 16) | ((kStrideBytes >> 4) << 32);
}

// Keeps the compiler from moving accumulator reads or writes across the asynchronous wgmma.
__device__ __forceinline__ void fence_accumulators(float (&d)[kAccumulators]) {
#pragma unroll
  for (int i = 0; i < kAccumulators; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

#define VOXD_WGMMA_OUTPUTS                                                                      \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "  \
  "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, "  \
  "%74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, "  \
  "%92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, "    \
  "%108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, "  \
  "%123, %124, %125, %126, %127}"
#define VOXD_ACC8(i)                                                                          \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define VOXD_ACCUMULATORS                                                                       \
  VOXD_ACC8(0), VOXD_ACC8(8), VOXD_ACC8(16), VOXD_ACC8(24), VOXD_ACC8(32), VOXD_ACC8(40),       \
      VOXD_ACC8(48), VOXD_ACC8(56), VOXD_ACC8(64), VOXD_ACC8(72), VOXD_ACC8(80), VOXD_ACC8(88), \
      VOXD_ACC8(96), VOXD_ACC8(104), VOXD_ACC8(112), VOXD_ACC8(120)

// d (64 × 256, F32) += A (64 × 16 from a_desc) · B (16 × 256 from b_desc), both from shared
// memory; accumulator i of a thread is row 16·warp + lane / 4 + 8·((i / 2) % 2), column
// 8·(i / 4) + 2·(lane % 4) + i % 2.
template <typename T>
__device__ __forceinline__ void wgmma_64x256x16(float (&d)[kAccumulators], uint64_t a_desc,
                                                uint64_t b_desc);
template <>
__device__ __forceinline__ void wgmma_64x256x16<__half>(float (&d)[kAccumulators], uint64_t a_desc,
                                                        uint64_t b_desc) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 " VOXD_WGMMA_OUTPUTS
               ", %128, %129, 1, 1, 1, 0, 0;\n"
               : VOXD_ACCUMULATORS
               : "l"(a_desc), "l"(b_desc));
}
template <>
__device__ __forceinline__ void wgmma_64x256x16<__nv_bfloat16>(float (&d)[kAccumulators],
                                                               uint64_t a_desc, uint64_t b_desc) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " VOXD_WGMMA_OUTPUTS
               ", %128, %129, 1, 1, 1, 0, 0;\n"
               : VOXD_ACCUMULATORS
               : "l"(a_desc), "l"(b_desc));
}
#undef VOXD_ACCUMULATORS
#undef VOXD_ACC8
#undef VOXD_WGMMA_OUTPUTS

// The producer: one thread issues every stage's copies, waiting for the consumers to free a
// stage before it is refilled.
template <int kTaps>
__device__ __forceinline__ void produce(const CUtensorMap* window_map,
                                        const CUtensorMap* weight_map, const WgmmaPlan& plan,
                                        uint32_t stages, uint64_t* full, uint64_t* empty, int t0,
                                        int co0, int b) {
  for (int s = 0; s < plan.channel_stages; ++s) {
    const int slot = s % plan.stages;
    const int round = s / plan.stages;
    if (round > 0) barrier_wait(shared_address(&empty[slot]), (round - 1) & 1);
    const uint32_t barrier = shared_address(&full[slot]);
    barrier_expect_bytes(barrier, static_cast<uint32_t>(plan.stage_bytes));
    const uint32_t stage = stages + static_cast<uint32_t>(slot * plan.stage_bytes);
    constexpr int kGroups = groups_for_taps(kTaps);
    const uint32_t weights = stage + static_cast<uint32_t>(kGroups * plan.column_bytes);
    for (int g = 0; g < kGroups; ++g) {
      const int group = s * kGroups + g;
      const uint32_t column = stage + static_cast<uint32_t>(g * plan.column_bytes);
      for (int box = 0; box < plan.boxes; ++box) {
        tma_load(column + box * kBoxRows * kGroupBytes, window_map, 0, t0 + box * kBoxRows, group,
                 b, barrier);
      }
      tma_load(weights + static_cast<uint32_t>(g * plan.weight_group_bytes), weight_map, 0, co0,
               group * kTaps, 0, barrier);
    }
  }
}

// A consumer warpgroup: its 64 output channels × kTileSteps steps, then the epilogue.
template <typename T, int kBlockChannels, int kTaps>
__device__ __forceinline__ void consume(const ImplicitGemmConv& a, const WgmmaPlan& plan,
                                        uint32_t stages, uint64_t* full, uint64_t* empty,
                                        int warpgroup, int t0, int co0, int b) {
  float d[kAccumulators];
#pragma unroll
  for (int i = 0; i < kAccumulators; ++i) d[i] = 0.0f;
  constexpr int kGroups = groups_for_taps(kTaps);
  const uint32_t a_offset = static_cast<uint32_t>(kGroups * plan.column_bytes +
                                                  warpgroup * kWarpgroupChannels * kGroupBytes);
  const uint32_t tap_a = kBlockChannels * kGroupBytes;
  const uint32_t tap_b = static_cast<uint32_t>(plan.dilation * kGroupBytes);
  for (int s = 0; s < plan.channel_stages; ++s) {
    const int slot = s % plan.stages;
    barrier_wait(shared_address(&full[slot]), (s / plan.stages) & 1);
    const uint32_t stage = stages + static_cast<uint32_t>(slot * plan.stage_bytes);
    fence_accumulators(d);
    wgmma_fence();
#pragma unroll
    for (int pair = 0; pair < kGroups / 2; ++pair) {
      const uint32_t weights =
          stage + a_offset + static_cast<uint32_t>(2 * pair * plan.weight_group_bytes);
      const uint32_t window = stage + static_cast<uint32_t>(2 * pair * plan.column_bytes);
#pragma unroll
      for (int k = 0; k < kTaps; ++k) {
        wgmma_64x256x16<T>(d, descriptor(weights + k * tap_a, plan.weight_group_bytes),
                           descriptor(window + k * tap_b, plan.column_bytes));
      }
    }
    wgmma_commit();
    fence_accumulators(d);
    // The stage before this one is read by now: its slot can be refilled.
    wgmma_wait<1>();
    if (s > 0) barrier_arrive(shared_address(&empty[(s - 1) % plan.stages]));
  }
  wgmma_wait<0>();
  fence_accumulators(d);

  const int warp = (threadIdx.x / 32) % 4;
  const int lane = threadIdx.x % 32;
  const T* bias = static_cast<const T*>(a.bias);
  auto epilogue = [&](auto* out, const auto* residual) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t co = co0 + warpgroup * kWarpgroupChannels + warp * 16 + h * 8 + lane / 4;
      if (co >= a.out_channels) continue;
      const float bias_value = bias ? to_float(bias[co]) : 0.0f;
      const int64_t row_start = (b * a.out_channels + co) * a.out_steps;
#pragma unroll
      for (int j = 0; j < kTileSteps / 8; ++j) {
        const int64_t t = t0 + 8 * j + 2 * (lane % 4);
        store_output_pair(out, residual, row_start + t, t, a.out_steps,
                          d[4 * j + 2 * h] + bias_value, d[4 * j + 2 * h + 1] + bias_value);
      }
    }
  };
  if (a.output_dtype == DType::F32) {
    epilogue(static_cast<float*>(a.out), static_cast<const float*>(a.residual));
  } else {
    epilogue(static_cast<T*>(a.out), static_cast<const T*>(a.residual));
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// Warpgroup 0 produces (its registers given up to the consumers when there are two), the rest
// consume. Built for sm_90a only; the portable PTX of this file traps (never launched: the host
// launches it on compute capability 9.0 alone, where the sm_90a code runs).
template <typename T, int kConsumers, int kTaps>
__global__ void __launch_bounds__((kConsumers + 1) * kWarpgroupThreads, 1)
    wgmma_conv_kernel(const __grid_constant__ CUtensorMap window_map,
                      const __grid_constant__ CUtensorMap weight_map, ImplicitGemmConv a,
                      WgmmaPlan plan) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __shared__ __align__(8) uint64_t full[kMaxStages];
  __shared__ __align__(8) uint64_t empty[kMaxStages];
  extern __shared__ __align__(kAlign) unsigned char dynamic_shared[];
  const uint32_t stages = (shared_address(dynamic_shared) + kAlign - 1) / kAlign * kAlign;
  const int warpgroup = static_cast<int>(threadIdx.x) / kWarpgroupThreads;
  const int t0 = static_cast<int>(blockIdx.x) * kTileSteps;
  const int co0 = static_cast<int>(blockIdx.y) * kConsumers * kWarpgroupChannels;
  const int b = static_cast<int>(blockIdx.z);
  if (threadIdx.x == 0) {
    for (int i = 0; i < plan.stages; ++i) {
      barrier_init(shared_address(&full[i]), 1);
      barrier_init(shared_address(&empty[i]), kConsumers * kWarpgroupThreads);
    }
    barrier_init_fence();
  }
  __syncthreads();
  if (warpgroup == 0) {
    if constexpr (kConsumers == 2) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (threadIdx.x == 0)
      produce<kTaps>(&window_map, &weight_map, plan, stages, full, empty, t0, co0, b);
  } else {
    if constexpr (kConsumers == 2) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    consume<T, kConsumers * kWarpgroupChannels, kTaps>(a, plan, stages, full, empty, warpgroup - 1,
                                                       t0, co0, b);
  }
#else
  (void)window_map, (void)weight_map, (void)a, (void)plan;
  __trap();
#endif
}

using EncodeTiled = PFN_cuTensorMapEncodeTiled_v12000;

// The driver's cuTensorMapEncodeTiled (through the runtime: no link to libcuda), or null.
EncodeTiled encode_tiled() {
  static const EncodeTiled function = [] {
    void* entry = nullptr;
    cudaDriverEntryPointQueryResult status{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &entry, 12000, cudaEnableDefault,
                                         &status) != cudaSuccess ||
        status != cudaDriverEntryPointSuccess) {
      return EncodeTiled{nullptr};
    }
    return reinterpret_cast<EncodeTiled>(entry);
  }();
  return function;
}

// A rank-4 tiled tensor map over F16 or BF16 `base`: dims innermost first, the byte strides of
// dims 1 to 3, the box copied. Out-of-bounds elements arrive as zeros.
CUtensorMap tensor_map(DType dtype, void* base, const cuuint64_t (&dims)[4],
                       const cuuint64_t (&strides)[3], const cuuint32_t (&box)[4], const char* op,
                       const char* what) {
  CUtensorMap map{};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  const CUresult result = encode_tiled()(
      &map,
      dtype == DType::BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
      base, dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS) {
    throw Error(std::string("cuda: ") + op + ": cuTensorMapEncodeTiled for the " + what +
                " failed (CUresult " + std::to_string(static_cast<int>(result)) + ")");
  }
  return map;
}

template <typename T, int kConsumers, int kTaps>
void launch(const ImplicitGemmConv& a, int64_t rows, int64_t channels, cudaStream_t stream,
            const char* op) {
  constexpr int kBlockChannels = kConsumers * kWarpgroupChannels;
  const WgmmaPlan plan = plan_for(a, channels, kBlockChannels);
  arrange_weights<kGroupChannels, T>(a, stream, op);

  const auto u64 = [](int64_t v) { return static_cast<cuuint64_t>(v); };
  const int64_t groups = channels / kGroupChannels;
  const cuuint64_t window_dims[4] = {kGroupChannels, u64(rows), u64(groups), u64(a.batch)};
  const cuuint64_t window_strides[3] = {kGroupBytes, u64(rows * kGroupBytes),
                                        u64(rows * channels * 2)};
  const cuuint32_t window_box[4] = {kGroupChannels, kBoxRows, 1, 1};
  const CUtensorMap window_map = tensor_map(a.dtype, a.transposed_input, window_dims,
                                            window_strides, window_box, op, "input window");
  const cuuint64_t weight_dims[4] = {kGroupChannels, u64(a.out_channels), u64(groups * a.kernel),
                                     1};
  const cuuint64_t weight_strides[3] = {kGroupBytes, u64(a.out_channels * kGroupBytes),
                                        u64(groups * a.kernel * a.out_channels * kGroupBytes)};
  const cuuint32_t weight_box[4] = {kGroupChannels, kBlockChannels,
                                    static_cast<cuuint32_t>(a.kernel), 1};
  const CUtensorMap weight_map = tensor_map(a.dtype, a.arranged_weight, weight_dims, weight_strides,
                                            weight_box, op, "weights");

  const size_t bytes = static_cast<size_t>(plan.stages) * plan.stage_bytes + kAlign;
  auto* kernel = wgmma_conv_kernel<T, kConsumers, kTaps>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(bytes)),
        "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)", op);
  const dim3 grid(static_cast<unsigned>((a.out_steps + kTileSteps - 1) / kTileSteps),
                  static_cast<unsigned>((a.out_channels + kBlockChannels - 1) / kBlockChannels),
                  static_cast<unsigned>(a.batch));
  kernel<<<grid, (kConsumers + 1) * kWarpgroupThreads, bytes, stream>>>(window_map, weight_map, a,
                                                                        plan);
  check(cudaGetLastError(), "wgmma_conv_kernel launch", op);
}

template <typename T, int kTaps>
void launch_for_taps(const ImplicitGemmConv& a, int64_t rows, int64_t channels, cudaStream_t stream,
                     const char* op) {
  if (block_channels_for(a.out_channels) == kWarpgroupChannels) {
    launch<T, 1, kTaps>(a, rows, channels, stream, op);
  } else {
    launch<T, 2, kTaps>(a, rows, channels, stream, op);
  }
}

template <typename T>
void launch_for(const ImplicitGemmConv& a, int64_t rows, int64_t channels, cudaStream_t stream,
                const char* op) {
  switch (a.kernel) {
    case 3:
      return launch_for_taps<T, 3>(a, rows, channels, stream, op);
    case 5:
      return launch_for_taps<T, 5>(a, rows, channels, stream, op);
    case 7:
      return launch_for_taps<T, 7>(a, rows, channels, stream, op);
    case 11:
      return launch_for_taps<T, 11>(a, rows, channels, stream, op);
    default:
      throw Error(std::string("cuda: ") + op + ": the wgmma convolution has no kernel for " +
                  std::to_string(a.kernel) + " taps");
  }
}

}  // namespace

bool wgmma_conv_available() {
#if defined(VOXD_CUDA_SM90A)
  int device = 0;
  int major = 0;
  int minor = 0;
  return cudaGetDevice(&device) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
         cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess &&
         major == 9 && minor == 0 && encode_tiled() != nullptr;
#else
  return false;
#endif
}

bool wgmma_conv_fits(const ImplicitGemmConv& a, int64_t channels, int64_t min_blocks) {
  const bool more_terms = a.addend != nullptr || a.output_scale != 1.0f || a.output_leaky_relu;
  if ((a.dtype != DType::F16 && a.dtype != DType::BF16) || a.out_channels < kWarpgroupChannels ||
      !built_for_taps(a.kernel) || more_terms) {
    return false;
  }
  const int block_channels = block_channels_for(a.out_channels);
  if (plan_for(a, channels, block_channels).stages < 2) return false;
  const int64_t blocks = (a.out_steps + kTileSteps - 1) / kTileSteps *
                         ((a.out_channels + block_channels - 1) / block_channels) * a.batch;
  return blocks >= min_blocks;
}

void wgmma_conv1d(const ImplicitGemmConv& a, int64_t rows, int64_t channels, cudaStream_t stream,
                  const char* op) {
  if (a.dtype == DType::F16) {
    launch_for<__half>(a, rows, channels, stream, op);
  } else {
    launch_for<__nv_bfloat16>(a, rows, channels, stream, op);
  }
}

}  // namespace voxd::cuda
