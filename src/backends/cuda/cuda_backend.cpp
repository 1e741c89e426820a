#include "backends/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>
#include <cassert>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backends/cuda/bias_gemm.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cudnn_convolutions.h"
#include "backends/cuda/few_rows.h"
#include "backends/cuda/flash_attention.h"
#include "backends/cuda/implicit_gemm_conv.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/lstm.h"
#include "backends/cuda/sample_tokens.h"
#include "core/error.h"
#include "core/ops.h"

namespace voxd {

namespace {

// Elements of im2col / col2im columns and attention scores one chunk may use (64 MiB in F32).
constexpr int64_t kScratchElements = int64_t{1} << 24;
// Frames one istft chunk transforms at most (whole batch items at a time, at least one), and the
// most transforms one cuFFT call makes (a power of two).
constexpr int64_t kFftFrames = 4096;
// cuFFT plans kept per backend (istft's take 13 per FFT size); the oldest goes first.
constexpr size_t kMaxFftPlans = 32;

// The cuFFT work area a PlanOnly backend counts for `transforms` inverse FFTs of n points.
size_t plan_only_fft_work_bytes(int64_t n, int64_t transforms) {
  return static_cast<size_t>(transforms) * static_cast<size_t>(n) * 2 * sizeof(float);
}
// cublasSetWorkspace needs this alignment.
constexpr uintptr_t kWorkspaceAlignment = 256;

// Runs `wait`, a call that blocks until the device has done queued work, adding the seconds it
// blocked to `waited`; returns its status.
template <typename Wait>
cudaError_t timed_wait(double& waited, Wait&& wait) {
  const auto start = std::chrono::steady_clock::now();
  const cudaError_t status = wait();
  waited += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return status;
}

// Pinned host memory that uploads are staged through, so that cudaMemcpyAsync reads memory that
// stays valid until the copy has run and the host never waits for the stream to upload. Space is
// handed out in ring order; every staged copy records an event, and space is reused once the
// copies reading it are done (long since, unless the device is far behind the host).
class StagingRing {
 public:
  static constexpr size_t kBytes = size_t{8} << 20;
  static constexpr size_t kAlignment = 64;

  // Allocates the ring on the current device's context.
  explicit StagingRing(const char* op) {
    void* base = nullptr;
    VOXD_CUDA_CHECK(op, cudaHostAlloc(&base, kBytes, cudaHostAllocDefault));
    base_ = static_cast<char*>(base);
  }
  // Waits for the copies still reading the ring.
  ~StagingRing() {
    for (const Pending& p : pending_) {
      cudaEventSynchronize(p.event);
      cudaEventDestroy(p.event);
    }
    for (cudaEvent_t event : spare_) cudaEventDestroy(event);
    cudaFreeHost(base_);
  }
  StagingRing(const StagingRing&) = delete;
  StagingRing& operator=(const StagingRing&) = delete;

  // Queues the copy of `bytes` from host `data` to device `dst` on `stream`, in pieces of at most
  // the ring's size; `data` may go once this returns.
  void upload(void* dst, const void* data, size_t bytes, cudaStream_t stream, const char* op) {
    const auto* from = static_cast<const char*>(data);
    auto* to = static_cast<char*>(dst);
    while (bytes > 0) {
      const size_t piece = std::min(bytes, kBytes);
      const size_t size = (piece + kAlignment - 1) / kAlignment * kAlignment;
      const size_t start = head_ + size <= kBytes ? head_ : 0;
      reclaim(start, start + size, op);
      std::memcpy(base_ + start, from, piece);
      VOXD_CUDA_CHECK(op,
                      cudaMemcpyAsync(to, base_ + start, piece, cudaMemcpyHostToDevice, stream));
      cudaEvent_t event = nullptr;
      if (spare_.empty()) {
        VOXD_CUDA_CHECK(op, cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
      } else {
        event = spare_.back();
        spare_.pop_back();
      }
      VOXD_CUDA_CHECK(op, cudaEventRecord(event, stream));
      pending_.push_back({start, start + size, event});
      head_ = start + size;
      from += piece;
      to += piece;
      bytes -= piece;
    }
  }

  // Seconds upload() has waited for copies still reading the space it needed.
  double waited_seconds() const { return waited_seconds_; }

 private:
  struct Pending {
    size_t begin;
    size_t end;
    cudaEvent_t event;
  };

  // Makes [begin, end) free: waits for the newest pending copy that reads it (copies on one
  // stream finish in order, so the older ones are done too), and retires finished copies.
  void reclaim(size_t begin, size_t end, const char* op) {
    size_t retire = 0;
    for (size_t i = 0; i < pending_.size(); ++i) {
      if (pending_[i].begin < end && begin < pending_[i].end) retire = i + 1;
    }
    if (retire > 0) {
      const cudaEvent_t newest = pending_[retire - 1].event;
      VOXD_CUDA_CHECK(op,
                      timed_wait(waited_seconds_, [&] { return cudaEventSynchronize(newest); }));
    }
    for (; retire > 0; --retire) retire_front();
    while (!pending_.empty()) {
      const cudaError_t status = cudaEventQuery(pending_.front().event);
      if (status == cudaErrorNotReady) {
        cudaGetLastError();  // not an error: clear it so the next launch check does not see it
        break;
      }
      VOXD_CUDA_CHECK(op, status);
      retire_front();
    }
  }

  void retire_front() {
    spare_.push_back(pending_.front().event);
    pending_.pop_front();
  }

  char* base_;
  double waited_seconds_ = 0;
  size_t head_ = 0;
  std::deque<Pending> pending_;
  std::vector<cudaEvent_t> spare_;
};

// An instantiated CUDA graph that launches on one stream.
class CudaGraph final : public CapturedWork {
 public:
  CudaGraph(int index, cudaStream_t stream, cudaGraphExec_t exec)
      : index_(index), stream_(stream), exec_(exec) {}
  // Waits for launches still running, then destroys the graph.
  ~CudaGraph() override {
    cudaSetDevice(index_);
    cudaStreamSynchronize(stream_);
    cudaGraphExecDestroy(exec_);
  }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  void replay() override {
    VOXD_CUDA_CHECK("replay", cudaSetDevice(index_));
    VOXD_CUDA_CHECK("replay", cudaGraphLaunch(exec_, stream_));
  }

 private:
  int index_;
  cudaStream_t stream_;
  cudaGraphExec_t exec_;
};

// Ends a capture that failed on the way and drops what it recorded, so the stream runs work again.
void abandon_capture(cudaStream_t stream) {
  cudaGraph_t partial = nullptr;
  cudaStreamEndCapture(stream, &partial);
  if (partial != nullptr) cudaGraphDestroy(partial);
  cudaGetLastError();
}

}  // namespace

// What profile_host_time counts: each outermost op's calls.
class CudaBackend::HostProfile {
 public:
  // Whether a call starting now is outermost (and counted).
  bool enter() { return depth_++ == 0; }
  // Ends a call; `op` is counted `seconds` when the call was outermost.
  void leave(const char* op, bool outermost, double seconds) {
    --depth_;
    if (!outermost) return;
    OpHostTime& time = times_[op];
    ++time.calls;
    time.seconds += seconds;
    time.longest_seconds = std::max(time.longest_seconds, seconds);
  }
  std::vector<OpHostTime> take() {
    std::vector<OpHostTime> taken;
    for (auto& [op, time] : times_) {
      time.op = op;
      taken.push_back(std::move(time));
    }
    times_.clear();
    std::sort(taken.begin(), taken.end(),
              [](const OpHostTime& a, const OpHostTime& b) { return a.seconds > b.seconds; });
    return taken;
  }

 private:
  int depth_ = 0;
  std::map<std::string, OpHostTime> times_;
};

CudaBackend::OpScope::OpScope(HostProfile* profile, const char* op)
    : profile_(profile), op_(op), outermost_(profile != nullptr && profile->enter()) {
  if (outermost_) start_ = std::chrono::steady_clock::now();
}

CudaBackend::OpScope::~OpScope() {
  if (profile_ == nullptr) return;
  const double seconds =
      outermost_ ? std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count()
                 : 0.0;
  profile_->leave(op_, outermost_, seconds);
}

struct CudaBackend::Handles {
  // A cuFFT plan of `batch` inverse real transforms of one size, made with
  // cufftSetAutoAllocation(0): its work area (work_bytes) comes from the call's scratch.
  struct FftPlan {
    cufftHandle handle = 0;
    size_t work_bytes = 0;
    uint64_t last_use = 0;
  };

  int index = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  cuda::BiasGemm bias_gemm;
  std::unique_ptr<StagingRing> staging;
  std::unique_ptr<cuda::CudnnConvolutions> cudnn;
  std::map<std::pair<int64_t, int64_t>, FftPlan> fft_plans;  // by (n, batch)
  uint64_t fft_uses = 0;
  // While profile_host_time is on.
  std::unique_ptr<HostProfile> host_profile;
  // Seconds the host blocked on `stream`: synchronize(), and copies to the host with the work
  // queued before them.
  double waited_seconds = 0;

  // Blocks until `stream` is done, counted in waited_seconds.
  cudaError_t wait_for_stream() {
    return timed_wait(waited_seconds, [&] { return cudaStreamSynchronize(stream); });
  }
  // Copies `bytes` from the device to host memory `to` after the work queued on `stream`, and
  // waits for it (a copy to pageable memory blocks in cudaMemcpyAsync itself), counted in
  // waited_seconds.
  cudaError_t download(void* to, const void* from, size_t bytes) {
    return timed_wait(waited_seconds, [&] {
      const cudaError_t queued = cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToHost, stream);
      return queued != cudaSuccess ? queued : cudaStreamSynchronize(stream);
    });
  }

  // The plan of `batch` inverse real FFTs of n points (input [batch, n/2 + 1] complex, output
  // [batch, n] real, both packed), made on first use on this backend's stream.
  FftPlan& inverse_fft(int64_t n, int64_t batch, const char* op) {
    auto found = fft_plans.find({n, batch});
    if (found == fft_plans.end()) {
      if (fft_plans.size() >= kMaxFftPlans) {
        auto oldest = fft_plans.begin();
        for (auto it = fft_plans.begin(); it != fft_plans.end(); ++it) {
          if (it->second.last_use < oldest->second.last_use) oldest = it;
        }
        VOXD_CUDA_CHECK(op, cudaStreamSynchronize(stream));  // it may still be running
        cufftDestroy(oldest->second.handle);
        fft_plans.erase(oldest);
      }
      FftPlan plan;
      VOXD_CUDA_CHECK(op, cufftCreate(&plan.handle));
      int size = static_cast<int>(n);
      const cufftResult made = [&] {
        cufftResult r = cufftSetAutoAllocation(plan.handle, 0);
        if (r == CUFFT_SUCCESS) {
          r = cufftMakePlanMany(plan.handle, 1, &size, nullptr, 1, static_cast<int>(n / 2 + 1),
                                nullptr, 1, size, CUFFT_C2R, static_cast<int>(batch),
                                &plan.work_bytes);
        }
        if (r == CUFFT_SUCCESS) r = cufftSetStream(plan.handle, stream);
        return r;
      }();
      if (made != CUFFT_SUCCESS) cufftDestroy(plan.handle);
      VOXD_CUDA_CHECK(op, made);
      found = fft_plans.emplace(std::pair{n, batch}, plan).first;
    }
    found->second.last_use = ++fft_uses;
    return found->second;
  }

  ~Handles() {
    cudaSetDevice(index);
    if (stream != nullptr) cudaStreamSynchronize(stream);
    for (auto& [shape, plan] : fft_plans) cufftDestroy(plan.handle);
    staging.reset();
    cudnn.reset();
    if (cublas != nullptr) cublasDestroy(cublas);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

namespace {

[[noreturn]] void fail(const char* op, const std::string& message) {
  throw Error(std::string("cuda: ") + op + ": " + message);
}

cudaDataType cuda_type(DType dtype) {
  switch (dtype) {
    case DType::F16:
      return CUDA_R_16F;
    case DType::BF16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

// Pointer to element `index` of t's storage view.
void* element(const Tensor& t, int64_t index) {
  return static_cast<char*>(t.raw_data()) + index * static_cast<int64_t>(dtype_size(t.dtype()));
}

// `sizes` with `strides`, size-1 dimensions dropped and dimensions that walk memory as one merged.
cuda::Layout make_layout(const char* op, const Shape& sizes, const Shape& strides) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (size, stride), outermost first
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    if (!dims.empty() && dims.back().second == strides[d] * sizes[d]) {
      dims.back() = {dims.back().first * sizes[d], strides[d]};
    } else {
      dims.emplace_back(sizes[d], strides[d]);
    }
  }
  if (dims.size() > static_cast<size_t>(cuda::kMaxDims)) {
    fail(op, "a layout of shape " + shape_to_string(sizes) + " and strides " +
                 shape_to_string(strides) + " has more than " + std::to_string(cuda::kMaxDims) +
                 " dimensions the kernels cannot merge");
  }
  cuda::Layout layout;
  layout.rank = static_cast<int>(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    layout.sizes[d] = dims[d].first;
    layout.strides[d] = dims[d].second;
  }
  return layout;
}

int gemm_int(const char* op, int64_t value) {
  if (value > INT_MAX)
    fail(op, "gemm dimension " + std::to_string(value) + " exceeds cuBLAS's int");
  return static_cast<int>(value);
}

// One gemm operand: data, element type, leading dimension and stride between batch entries.
struct Operand {
  const void* data;
  cudaDataType type;
  int64_t ld;
  int64_t batch_stride;
};

// Column-major C = alpha·op(A)·op(B) + beta·C for `batch` entries, accumulating in F32.
void gemm(cublasHandle_t handle, const char* op, cublasOperation_t ta, cublasOperation_t tb,
          int64_t m, int64_t n, int64_t k, const Operand& a, const Operand& b, float beta, void* c,
          cudaDataType c_type, int64_t ldc, int64_t c_stride, int64_t batch, float alpha = 1.0f) {
  VOXD_CHECK(k > 0, "gemm with an empty inner dimension");
  if (m == 0 || n == 0 || batch == 0) return;
  VOXD_CUDA_CHECK(op, cublasGemmStridedBatchedEx(
                          handle, ta, tb, gemm_int(op, m), gemm_int(op, n), gemm_int(op, k), &alpha,
                          a.data, a.type, gemm_int(op, a.ld), a.batch_stride, b.data, b.type,
                          gemm_int(op, b.ld), b.batch_stride, &beta, c, c_type, gemm_int(op, ldc),
                          c_stride, gemm_int(op, batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

namespace {

// VOXD_CUDA_CONV: how convolutions run — "auto" (the default: the own mma.sync implicit-GEMM
// kernel for long F16/BF16 sequences, two in a row as one pair where conv1d_pair asks, cuBLAS
// gemms over im2col / col2im columns for the rest),
// "wgmma" (the same with Hopper's wgmma kernel where it applies: not yet faster, bench/NOTES.md),
// "cudnn" (cuDNN for every convolution) or "im2col" (columns for every convolution); the last
// three are kept to compare against.
CudaBackend::ConvolutionPath convolution_path() {
  const char* value = std::getenv("VOXD_CUDA_CONV");
  const std::string_view name = value == nullptr ? "" : value;
  if (name.empty() || name == "auto") return CudaBackend::ConvolutionPath::kAuto;
  if (name == "wgmma") return CudaBackend::ConvolutionPath::kWgmma;
  if (name == "cudnn") return CudaBackend::ConvolutionPath::kCudnn;
  if (name == "im2col") return CudaBackend::ConvolutionPath::kIm2col;
  throw InputError("VOXD_CUDA_CONV is \"" + std::string(name) +
                   "\"; expected \"auto\", \"wgmma\", \"cudnn\" or \"im2col\"");
}

}  // namespace

CudaBackend::CudaBackend(int index, QueuePriority priority)
    : index_(index), handles_(std::make_unique<Handles>()), convolution_path_(convolution_path()) {
  cuda::require_device(index);
  handles_->index = index;
  VOXD_CUDA_CHECK("open", cudaSetDevice(index));
  int least = 0;
  int greatest = 0;
  VOXD_CUDA_CHECK("open", cudaDeviceGetStreamPriorityRange(&least, &greatest));
  VOXD_CUDA_CHECK(
      "open", cudaStreamCreateWithPriority(&handles_->stream, cudaStreamDefault,
                                           priority == QueuePriority::kFirst ? greatest : least));
  VOXD_CUDA_CHECK("open", cublasCreate(&handles_->cublas));
  VOXD_CUDA_CHECK("open", cublasSetStream(handles_->cublas, handles_->stream));
  // No TF32: F32 gemms stay F32 (the 1e-4 parity with the reference depends on it).
  VOXD_CUDA_CHECK("open", cublasSetMathMode(handles_->cublas, CUBLAS_DEFAULT_MATH));
  handles_->staging = std::make_unique<StagingRing>("open");
  if (convolution_path_ == ConvolutionPath::kCudnn) {
    handles_->cudnn = std::make_unique<cuda::CudnnConvolutions>(handles_->stream);
  }
}

CudaBackend::CudaBackend(int index, PlanOnly)
    : index_(index), convolution_path_(convolution_path()) {}

CudaBackend::~CudaBackend() = default;

int CudaBackend::stream_priority() const {
  if (plan_only()) return 0;
  int priority = 0;
  VOXD_CUDA_CHECK("stream_priority", cudaStreamGetPriority(handles_->stream, &priority));
  return priority;
}

std::string CudaBackend::name() const {
  return "cuda:" + std::to_string(index_);
}

bool CudaBackend::supports(OpKind op, DType dtype) const {
  if (op == OpKind::Bucketize || op == OpKind::Istft || op == OpKind::SampleTokens) {
    return dtype == DType::F32;
  }
  return is_floating(dtype);
}

void CudaBackend::synchronize() {
  const OpScope scope = open("synchronize");
  VOXD_CUDA_CHECK("synchronize", handles_->wait_for_stream());
}

double CudaBackend::device_wait_seconds() const {
  if (handles_ == nullptr) return 0;  // PlanOnly: nothing ever queued
  return handles_->waited_seconds +
         (handles_->staging != nullptr ? handles_->staging->waited_seconds() : 0.0);
}

std::unique_ptr<CapturedWork> CudaBackend::capture(const std::function<void()>& work) {
  const char* op = "capture";
  const OpScope scope = open(op);
  cudaStream_t stream = handles_->stream;
  VOXD_CUDA_CHECK(op, cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    work();
  } catch (const Error& e) {
    abandon_capture(stream);
    fail(op, std::string("the work cannot be recorded as a CUDA graph: ") + e.what());
  } catch (...) {
    abandon_capture(stream);
    throw;
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  if (ended != cudaSuccess) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();
    fail(op, std::string("cudaStreamEndCapture failed: ") + cudaGetErrorName(ended) + " (" +
                 cudaGetErrorString(ended) +
                 "); the work called something stream capture does not allow (a "
                 "synchronisation, cudaMalloc, or work on another stream)");
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  VOXD_CUDA_CHECK(op, made);
  return std::make_unique<CudaGraph>(index_, stream, exec);
}

void CudaBackend::refuse_while_capturing(const char* op, const char* what) const {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  VOXD_CUDA_CHECK(op, cudaStreamIsCapturing(handles_->stream, &status));
  if (status != cudaStreamCaptureStatusNone) {
    fail(op, std::string(what) +
                 " cannot be recorded in a CUDA graph; move it out of the captured work (copy "
                 "inputs to the device before capture, read results after replay)");
  }
}

void CudaBackend::make_current(const char* op) const {
  if (plan_only()) {
    fail(op, name() +
                 " was made for planning only (CudaBackend(index, PlanOnly)) and runs no "
                 "kernels; open the device with CudaBackend(index) to run");
  }
  VOXD_CUDA_CHECK(op, cudaSetDevice(index_));
}

CudaBackend::OpScope CudaBackend::open(const char* op) const {
  make_current(op);
  return OpScope(handles_->host_profile.get(), op);
}

void CudaBackend::profile_host_time(bool on) {
  if (plan_only() || on == (handles_->host_profile != nullptr)) return;
  handles_->host_profile = on ? std::make_unique<HostProfile>() : nullptr;
}

std::vector<Backend::OpHostTime> CudaBackend::take_host_profile() {
  if (plan_only() || handles_->host_profile == nullptr) return {};
  return handles_->host_profile->take();
}

ScratchBuffer CudaBackend::take(const KernelScratch& scratch, size_t bytes) const {
  assert(scratch.device() == device());
  return scratch.take(bytes);
}

void CudaBackend::upload(void* dst, const void* data, size_t bytes, const char* op) const {
  refuse_while_capturing(op, "an upload of host data (staged through the reused pinned ring)");
  handles_->staging->upload(dst, data, bytes, handles_->stream, op);
}

cuda::SequenceValues CudaBackend::sequence_values(const std::vector<int64_t>& values,
                                                  const ScratchBuffer& buffer,
                                                  const char* op) const {
  cuda::SequenceValues out{};
  if (values.size() > static_cast<size_t>(cuda::SequenceValues::kInline)) {
    upload(buffer.data(), values.data(), values.size() * sizeof(int64_t), op);
    out.device = buffer.as<int64_t>();
  } else {
    std::copy(values.begin(), values.end(), out.values);
  }
  return out;
}

size_t CudaBackend::sequence_values_bytes(size_t count) {
  return count > static_cast<size_t>(cuda::SequenceValues::kInline) ? count * sizeof(int64_t) : 0;
}

cuda::RopeFrequencies CudaBackend::rope_frequency_table(const std::vector<float>& frequencies,
                                                        const ScratchBuffer& buffer,
                                                        const char* op) const {
  cuda::RopeFrequencies out{};
  if (frequencies.size() > static_cast<size_t>(cuda::RopeFrequencies::kInline)) {
    upload(buffer.data(), frequencies.data(), frequencies.size() * sizeof(float), op);
    out.device = buffer.as<float>();
  } else {
    std::copy(frequencies.begin(), frequencies.end(), out.values);
  }
  return out;
}

size_t CudaBackend::rope_frequency_bytes(size_t count) {
  return count > static_cast<size_t>(cuda::RopeFrequencies::kInline) ? count * sizeof(float) : 0;
}

void CudaBackend::use_gemm_workspace(const ScratchBuffer& workspace, const char* op) const {
  if (reinterpret_cast<uintptr_t>(workspace.data()) % kWorkspaceAlignment != 0) {
    fail(op, "the context's allocator returned memory not aligned to " +
                 std::to_string(kWorkspaceAlignment) + " bytes, which cuBLAS's workspace needs");
  }
  VOXD_CUDA_CHECK(op, cublasSetWorkspace(handles_->cublas, workspace.data(), workspace.bytes()));
}

namespace {

// A view whose last two dimensions are those of contiguous matrices swapped (x.transpose(-1, -2)
// of a contiguous x): batch matrices of rows × cols in memory, the view [..., cols, rows].
struct TransposedMatrices {
  int64_t batch = 1;
  int64_t rows = 0;
  int64_t cols = 0;
};

std::optional<TransposedMatrices> transposed_matrices(const Tensor& src) {
  const Shape& sizes = src.shape();
  const Shape& strides = src.strides();
  const size_t rank = sizes.size();
  if (rank < 2) return std::nullopt;
  TransposedMatrices t;
  t.cols = sizes[rank - 2];
  t.rows = sizes[rank - 1];
  if (t.rows < 2 || t.cols < 2 || strides[rank - 2] != 1 || strides[rank - 1] != t.cols) {
    return std::nullopt;
  }
  int64_t expected = t.rows * t.cols;
  for (size_t d = rank - 2; d-- > 0;) {
    if (sizes[d] != 1 && strides[d] != expected) return std::nullopt;
    expected *= sizes[d];
    t.batch *= sizes[d];
  }
  if (t.batch > 65535) return std::nullopt;
  return t;
}

}  // namespace

void CudaBackend::copy(const Tensor& src, Tensor& dst, const KernelScratch& scratch) {
  const char* op = "copy";
  assert(dst.is_contiguous() && src.numel() == dst.numel());
  const int64_t n = src.numel();
  if (n == 0) return;
  const bool plain = src.is_contiguous() && src.dtype() == dst.dtype();
  const bool download = !src.device().is_cpu() && dst.device().is_cpu();
  const bool upload_converted = src.device().is_cpu() && !dst.device().is_cpu() &&
                                src.is_contiguous() && src.dtype() != dst.dtype();
  // A download of strided or converted data is gathered on the device first; an upload in
  // another dtype goes up as it is and is converted there (weights: from the file's mapping to
  // the device's dtype without a converted copy on the host).
  const ScratchBuffer staged =
      take(scratch, download && !plain ? dst.nbytes() : (upload_converted ? src.nbytes() : 0));
  if (scratch.planning()) return;
  const OpScope scope = open(op);
  cudaStream_t stream = handles_->stream;
  if (src.device().is_cpu() && dst.device().is_cpu()) {
    refuse_while_capturing(op, "a copy between host tensors (it runs now, not on replay)");
    Tensor converted = src.to_host_contiguous(dst.dtype());
    std::memcpy(dst.raw_data(), converted.raw_data(), dst.nbytes());
  } else if (upload_converted) {
    upload(staged.data(), src.raw_data(), src.nbytes(), op);
    cuda::copy_strided(staged.data(), src.dtype(), make_layout(op, {n}, {1}), dst.raw_data(),
                       dst.dtype(), n, stream, op);
  } else if (src.device().is_cpu()) {
    // Strides resolved on the host, then one upload.
    const Tensor contiguous = plain ? src : src.to_host_contiguous(dst.dtype());
    upload(dst.raw_data(), contiguous.raw_data(), dst.nbytes(), op);
  } else if (download) {
    refuse_while_capturing(op, "a copy to the host (it waits for the stream)");
    const void* from = src.raw_data();
    if (!plain) {
      cuda::copy_strided(src.raw_data(), src.dtype(), make_layout(op, src.shape(), src.strides()),
                         staged.data(), dst.dtype(), n, stream, op);
      from = staged.data();
    }
    VOXD_CUDA_CHECK(op, handles_->download(dst.raw_data(), from, dst.nbytes()));
  } else if (plain) {
    VOXD_CUDA_CHECK(op, cudaMemcpyAsync(dst.raw_data(), src.raw_data(), dst.nbytes(),
                                        cudaMemcpyDeviceToDevice, stream));
  } else if (const std::optional<TransposedMatrices> t = transposed_matrices(src);
             t && src.dtype() == dst.dtype()) {
    cuda::transpose_matrices(src.raw_data(), dst.raw_data(),
                             static_cast<int>(dtype_size(src.dtype())), t->batch, t->rows, t->cols,
                             stream, op);
  } else {
    cuda::copy_strided(src.raw_data(), src.dtype(), make_layout(op, src.shape(), src.strides()),
                       dst.raw_data(), dst.dtype(), n, stream, op);
  }
}

void CudaBackend::fill(Tensor& dst, float value) {
  const char* op = "fill";
  const OpScope scope = open(op);
  uint64_t bits = 0;
  convert_elements(&value, DType::F32, &bits, dst.dtype(), 1);
  cuda::fill_pattern(dst.raw_data(), static_cast<int>(dtype_size(dst.dtype())), bits, dst.numel(),
                     handles_->stream, op);
}

void CudaBackend::unary(const Tensor& x, Tensor& out, UnaryOp kind, float alpha) {
  const char* op = "unary";
  const OpScope scope = open(op);
  assert(out.shape() == x.shape() && out.dtype() == x.dtype());
  cuda::unary(x.raw_data(), out.raw_data(), x.dtype(), x.numel(), kind, alpha, handles_->stream,
              op);
}

void CudaBackend::binary(const Tensor& a, const Tensor& b, Tensor& out, BinaryOp kind) {
  const char* op = "binary";
  const OpScope scope = open(op);
  assert(b.dim() == a.dim() && out.shape() == a.shape());
  Shape strides = contiguous_strides(b.shape());
  for (size_t d = 0; d < strides.size(); ++d) {
    if (b.shape()[d] == 1) strides[d] = 0;
  }
  cuda::binary(a.raw_data(), b.raw_data(), make_layout(op, a.shape(), strides), out.raw_data(),
               a.dtype(), a.numel(), kind, handles_->stream, op);
}

namespace {

// out = bias broadcast through `bias_strides` (out's rank, 0 where bias repeats), or zeros
// without a bias.
void fill_bias(const Tensor& bias, const Shape& bias_strides, Tensor& out, cudaStream_t stream,
               const char* op) {
  if (!bias.defined()) {
    cuda::fill_pattern(out.raw_data(), static_cast<int>(dtype_size(out.dtype())), 0, out.numel(),
                       stream, op);
    return;
  }
  cuda::copy_strided(bias.raw_data(), bias.dtype(), make_layout(op, out.shape(), bias_strides),
                     out.raw_data(), out.dtype(), out.numel(), stream, op);
}

// The n elements of `dtype` at data = ReLU of them, in place.
void relu_in_place(void* data, DType dtype, int64_t n, cudaStream_t stream, const char* op) {
  cuda::unary(data, data, dtype, n, UnaryOp::Relu, 0.0f, stream, op);
}

}  // namespace

void CudaBackend::linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out,
                         const KernelScratch& scratch) {
  const char* op = "linear";
  const int64_t rows = x.size(0);
  const int64_t in = x.size(1);
  const int64_t features = weight.size(0);
  assert(out.shape() == (Shape{rows, features}));
  if (out.numel() == 0) return;
  const ScratchBuffer workspace = take(scratch, in == 0 ? 0 : kCublasWorkspaceBytes);
  if (scratch.planning()) return;
  const OpScope scope = open(op);
  if (in == 0) {
    fill_bias(bias, {0, 1}, out, handles_->stream, op);
    return;
  }
  linear_rows(x.dtype(), rows, in, features, x.raw_data(), weight.raw_data(), bias, out.raw_data(),
              workspace, false, op);
}

void CudaBackend::linear_rows(DType dtype, int64_t rows, int64_t in, int64_t features,
                              const void* x, const void* weight, const Tensor& bias, void* out,
                              const ScratchBuffer& workspace, bool relu, const char* op) {
  cudaStream_t stream = handles_->stream;
  const void* bias_data = bias.defined() ? bias.raw_data() : nullptr;
  const auto relu_after = [&] {
    if (relu) relu_in_place(out, dtype, rows * features, stream, op);
  };
  if (cuda::few_rows_linear_fits(dtype, rows, in, x, weight, out)) {
    cuda::few_rows_linear(x, weight, bias_data, out, dtype, rows, in, features, stream, op);
    relu_after();
    return;
  }
  // With a bias: one cuBLASLt matmul adding it (and ReLU) in its epilogue, or, where cuBLASLt has
  // no algorithm, the bias goes into out first and the gemm accumulates onto it (beta 1). Either
  // way x·Wᵀ + bias is summed in F32 and rounded to a half dtype once.
  if (bias_data != nullptr &&
      handles_->bias_gemm.run(cuda_type(dtype), rows, in, features, x, weight, bias_data, out,
                              workspace.data(), workspace.bytes(), relu, stream, op)) {
    return;
  }
  use_gemm_workspace(workspace, op);
  const cudaDataType type = cuda_type(dtype);
  const auto element_size = static_cast<int64_t>(dtype_size(dtype));
  if (bias_data != nullptr) {
    cuda::copy_strided(bias_data, bias.dtype(), make_layout(op, {rows, features}, {0, 1}), out,
                       dtype, rows * features, stream, op);
  }
  const float beta = bias_data != nullptr ? 1.0f : 0.0f;
  // Row-major out [rows, features] is column-major [features, rows] = Wᵀ-as-stored · x.
  for (int64_t r0 = 0; r0 < rows; r0 += INT_MAX) {
    const int64_t count = std::min<int64_t>(INT_MAX, rows - r0);
    gemm(handles_->cublas, op, CUBLAS_OP_T, CUBLAS_OP_N, features, count, in, {weight, type, in, 0},
         {static_cast<const char*>(x) + r0 * in * element_size, type, in, 0}, beta,
         static_cast<char*>(out) + r0 * features * element_size, type, features, 0, 1);
  }
  relu_after();
}

bool CudaBackend::runs_conv1d_rows(const Tensor& /*x*/, const Tensor& /*weight*/,
                                   const Conv1dParams& p) const {
  return p.stride == 1 && p.groups == 1;
}

namespace {

// Whether conv1d_rows runs a convolution of `weight` [Cout, Cin, K] through the few-outputs
// kernel, which reads the weight as it is, rather than columns and a gemm.
bool few_outputs(const Tensor& weight, const Conv1dParams& p, int64_t batch, bool own_kernels) {
  return own_kernels && cuda::conv1d_rows_few_outputs_fits(batch, weight.size(1), weight.size(0),
                                                           weight.size(2), p.dilation);
}

// dst = `weight` [Cout, Cin, K] with its taps first, [Cout, K, Cin], as conv1d_rows's columns
// are: a transpose of each output channel's [Cin, K].
void write_taps_first(const Tensor& weight, void* dst, cudaStream_t stream, const char* op) {
  cuda::transpose_matrices(weight.raw_data(), dst, static_cast<int>(dtype_size(weight.dtype())),
                           weight.size(0), weight.size(1), weight.size(2), stream, op);
}

}  // namespace

int64_t CudaBackend::arranged_conv1d_rows_elements(const Tensor& weight,
                                                   const Conv1dParams& params) const {
  if (weight.dim() != 3 || weight.size(2) == 1 || !runs_conv1d_rows(Tensor(), weight, params) ||
      few_outputs(weight, params, 1, own_convolutions())) {
    return 0;
  }
  return weight.numel();
}

std::vector<int64_t> CudaBackend::arranged_conv1d_rows_order(const Tensor& weight,
                                                             const Conv1dParams& params) const {
  if (arranged_conv1d_rows_elements(weight, params) == 0) return {};
  return {0, 2, 1};
}

void CudaBackend::arrange_conv1d_rows_weight(const Tensor& weight, const Conv1dParams& /*params*/,
                                             Tensor& arranged, const KernelScratch& scratch) {
  const char* op = "arrange_conv1d_rows_weight";
  if (scratch.planning()) return;
  const OpScope scope = open(op);
  write_taps_first(weight, arranged.raw_data(), handles_->stream, op);
}

void CudaBackend::conv1d_rows(const Tensor& x, const Tensor& weight, const Tensor& bias,
                              Tensor& out, const Conv1dParams& p, const Tensor* arranged, bool relu,
                              const KernelScratch& scratch) {
  const char* op = "conv1d_rows";
  const DType dtype = x.dtype();
  const int64_t t_in = x.size(1);
  const int64_t cin = x.size(2);
  const int64_t k = weight.size(2);
  const int64_t t_out = out.size(1);
  const int64_t cout = out.size(2);
  assert(out.shape() == (Shape{x.size(0), t_out, weight.size(0)}) && p.stride == 1);
  if (out.numel() == 0) return;
  // The few-outputs kernel reads the weight in torch's order, which an arranged weight's
  // convolution may hold only as a view of the arrangement (never both: no weight the kernel
  // takes at one sequence is arranged).
  if (arranged == nullptr && few_outputs(weight, p, x.size(0), own_convolutions())) {
    // A gemm of a few columns wastes its tiles, and im2col writes k·cin values a step.
    if (scratch.planning()) return;
    const OpScope scope = open(op);
    cuda::conv1d_rows_few_outputs(
        x.raw_data(), weight.raw_data(), bias.defined() ? bias.raw_data() : nullptr, out.raw_data(),
        dtype, x.size(0), t_in, cin, t_out, cout, k, p.padding, p.dilation, handles_->stream, op);
    if (relu) relu_in_place(out.raw_data(), dtype, out.numel(), handles_->stream, op);
    return;
  }
  const int64_t width = cin * k;  // a row of columns: the taps first, each Cin values
  const int64_t rows = x.size(0) * t_out;
  // Rows' columns in chunks of at most kScratchElements, of equal size (a last chunk of a few
  // rows would run a gemm that fills few tiles).
  const int64_t most = width == 0 ? rows : std::clamp<int64_t>(kScratchElements / width, 1, rows);
  const int64_t chunks = (rows + most - 1) / most;
  const int64_t chunk = (rows + chunks - 1) / chunks;
  // The weight with its taps first, as the columns are, when it did not come so.
  const bool arrange_here = k > 1 && arranged == nullptr;
  const ScratchBuffer taps_first =
      take(scratch, arrange_here ? static_cast<size_t>(weight.numel()) * dtype_size(dtype) : 0);
  const ScratchBuffer cols = take(scratch, static_cast<size_t>(chunk * width) * dtype_size(dtype));
  const ScratchBuffer workspace = take(scratch, width == 0 ? 0 : kCublasWorkspaceBytes);
  if (scratch.planning()) return;
  const OpScope scope = open(op);
  if (width == 0) {
    fill_bias(bias, {0, 0, 1}, out, handles_->stream, op);
    if (relu) relu_in_place(out.raw_data(), dtype, out.numel(), handles_->stream, op);
    return;
  }
  const void* taps_first_weight = weight.raw_data();
  if (arranged != nullptr) {
    taps_first_weight = arranged->raw_data();
  } else if (arrange_here) {
    write_taps_first(weight, taps_first.data(), handles_->stream, op);
    taps_first_weight = taps_first.data();
  }
  const auto element_size = static_cast<int64_t>(dtype_size(dtype));
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t count = std::min(chunk, rows - r0);
    cuda::im2col_rows(x.raw_data(), dtype, t_in, cin, k, p.padding, p.dilation, t_out, r0, count,
                      cols.data(), handles_->stream, op);
    linear_rows(dtype, count, width, cout, cols.data(), taps_first_weight, bias,
                static_cast<char*>(out.raw_data()) + r0 * cout * element_size, workspace, relu, op);
  }
}

void CudaBackend::conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out,
                         const Conv1dParams& p, const KernelScratch& scratch) {
  const char* op = "conv1d";
  const DType dtype = x.dtype();
  const int64_t batch = x.size(0);
  const int64_t cin = x.size(1);
  const int64_t t_in = x.size(2);
  const int64_t cout = weight.size(0);
  const int64_t cin_g = weight.size(1);
  const int64_t k = weight.size(2);
  const int64_t t_out = out.size(2);
  const int64_t cout_g = cout / p.groups;
  assert(out.shape() == (Shape{batch, cout, t_out}) && cin_g * p.groups == cin);
  if (out.numel() == 0) return;
  if (cin_g == 1 && cout_g == 1 && own_convolutions()) {
    // Depthwise (ConvNeXt's groups == channels): a direct kernel, not one gemm per group.
    if (scratch.planning()) return;
    const OpScope scope = open(op);
    cuda::depthwise_conv1d(
        x.raw_data(), weight.raw_data(), bias.defined() ? bias.raw_data() : nullptr, out.raw_data(),
        dtype, batch, cout, t_in, t_out, k, p.stride, p.padding, p.dilation, handles_->stream, op);
    return;
  }
  const int64_t ckk = cin_g * k;
  // A pointwise convolution multiplies x itself; others go through cuDNN or im2col columns, a
  // chunk of output steps at a time.
  const bool pointwise = k == 1 && p.stride == 1 && p.padding == 0;
  if (fuses_conv1d(x, weight, dtype, p, /*weight_arranged=*/false)) {
    fused_conv1d(x, weight, bias, ConvFusion{}, out, p, scratch);
    return;
  }
  if (convolution_path_ == ConvolutionPath::kCudnn && !pointwise && ckk > 0 && t_in > 0) {
    cudnn_convolution(false, x, weight, bias, out, p.stride, p.padding, p.dilation, p.groups,
                      scratch, op);
    return;
  }
  const int64_t chunk = pointwise || ckk == 0
                            ? std::min<int64_t>(t_out, INT_MAX)
                            : std::clamp<int64_t>(kScratchElements / (batch * ckk), 1,
                                                  std::min<int64_t>(t_out, INT_MAX));
  const bool gemms = ckk > 0;
  const ScratchBuffer cols =
      take(scratch,
           !gemms || pointwise ? 0 : static_cast<size_t>(batch * ckk * chunk) * dtype_size(dtype));
  const ScratchBuffer workspace = take(scratch, gemms ? kCublasWorkspaceBytes : 0);
  if (scratch.planning()) return;
  const OpScope scope = open(op);
  cudaStream_t stream = handles_->stream;
  fill_bias(bias, {0, 1, 0}, out, stream, op);
  if (!gemms) return;
  use_gemm_workspace(workspace, op);
  const cudaDataType type = cuda_type(dtype);
  for (int64_t g = 0; g < p.groups; ++g) {
    for (int64_t t0 = 0; t0 < t_out; t0 += chunk) {
      const int64_t tc = std::min(chunk, t_out - t0);
      Operand a{element(x, g * cin_g * t_in + t0), type, t_in, cin * t_in};
      if (!pointwise) {
        cuda::im2col(x.raw_data(), dtype, batch, cin, t_in, g * cin_g, cin_g, k, p.stride,
                     p.padding, p.dilation, t0, tc, cols.data(), stream, op);
        a = {cols.data(), type, tc, ckk * tc};
      }
      // Row-major out_g [cout_g, tc] = W_g [cout_g, ckk] · cols [ckk, tc], i.e. column-major
      // out_gᵀ = colsᵀ · W_gᵀ, accumulated onto the bias.
      gemm(handles_->cublas, op, CUBLAS_OP_N, CUBLAS_OP_N, tc, cout_g, ckk, a,
           {element(weight, g * cout_g * ckk), type, ckk, 0}, 1.0f,
           element(out, g * cout_g * t_out + t0), type, t_out, cout * t_out, batch);
    }
  }
}

void CudaBackend::cudnn_convolution(bool transposed, const Tensor& x, const Tensor& weight,
                                    const Tensor& bias, Tensor& out, int64_t stride,
                                    int64_t padding, int64_t dilation, int64_t groups,
                                    const KernelScratch& scratch, const char* op) {
  const ScratchBuffer workspace = take(scratch, cuda::CudnnConvolutions::kWorkspaceBytes);
  if (scratch.planning()) return;
  const OpScope scope = open(op);
  const cuda::ConvolutionShape shape{x.dtype(), transposed,  x.size(0),   x.size(1),
                                     x.size(2), out.size(1), out.size(2), weight.size(2),
                                     stride,    padding,     dilation,    groups};
  // The algorithm is chosen first: timing it writes `out`.
  handles_->cudnn->prepare(shape, x.raw_data(), weight.raw_data(), out.raw_data(), workspace.data(),
                           op);
  fill_bias(bias, {0, 1, 0}, out, handles_->stream, op);
  handles_->cudnn->run(shape, x.raw_data(), weight.raw_data(), out.raw_data(), workspace.data(),
                       op);
}

namespace {

// Whether the implicit GEMM runs a conv1d of `weight` with `p` over sequences of `in_dtype` into
// `out_dtype`: F16/BF16 weights (under mixed precision the input and output may be F32 around
// them), a kernel it supports, and not pointwise (a plain gemm).
bool implicit_gemm_runs(DType in_dtype, const Tensor& weight, DType out_dtype,
                        const Conv1dParams& p) {
  if (weight.dim() != 3) return false;
  const DType dtype = weight.dtype();
  const bool dtypes = (in_dtype == dtype || in_dtype == DType::F32) &&
                      (out_dtype == dtype || out_dtype == DType::F32);
  const int64_t k = weight.size(2);
  const bool pointwise = k == 1 && p.stride == 1 && p.padding == 0;
  return !pointwise && dtypes &&
         cuda::implicit_gemm_conv1d_supported(dtype, k, p.dilation, p.stride, p.groups);
}

// Whether the implicit GEMM takes a single conv1d over `batch` sequences of `steps`: where it
// runs it and the batch fits its grid, and any one of: its weight came arranged (made when the
// model loaded, as pairs' are: then at any length), im2col's columns would not fit one chunk
// (the vocoder's long sequences: K× the input through memory), or its blocks fill the device
// anyway (HiFiGAN's first stage at one sequence: 17 % off the vocoder's time at B = 1,
// bench/NOTES.md). im2col + cuBLAS run the short ones whose weights would be arranged per call,
// where cuBLAS's tiles fill the device better.
bool implicit_gemm_takes(DType in_dtype, int64_t batch, int64_t steps, const Tensor& weight,
                         DType out_dtype, const Conv1dParams& p, bool weight_arranged) {
  if (batch > 65535 || !implicit_gemm_runs(in_dtype, weight, out_dtype, p)) return false;
  if (weight_arranged) return true;
  const int64_t k = weight.size(2);
  const bool long_columns = batch * weight.size(1) * k * steps > kScratchElements;
  const int64_t out_steps = steps + 2 * p.padding - p.dilation * (k - 1);  // at stride 1
  return long_columns || cuda::implicit_gemm_fills_device(batch, weight.size(0), out_steps);
}

// Whether the implicit GEMM's pair kernel takes `pair` over `batch` sequences: the batch within
// its grid, and both convolutions keeping the length (it throws otherwise).
bool pair_kernel_takes(int64_t batch, const Conv1dPair& pair) {
  const auto keeps_length = [](const Tensor& weight, const Conv1dParams& p) {
    return weight.dim() == 3 && 2 * p.padding == (weight.size(2) - 1) * p.dilation;
  };
  return batch <= 65535 && keeps_length(*pair.first_weight, pair.first) &&
         keeps_length(*pair.second_weight, pair.second);
}

// The implicit GEMM's arguments for a conv1d of `weight` and `bias` (or undefined) with `p`
// over `batch` sequences of `in_steps` into `out_steps`, its input through leaky_relu with
// `slope` when set; the data pointers other than the weights' and the bias's are the caller's.
cuda::ImplicitGemmConv implicit_gemm_args(const Tensor& weight, const Tensor& bias,
                                          const Conv1dParams& p, int64_t batch, int64_t in_steps,
                                          int64_t out_steps, std::optional<float> slope) {
  cuda::ImplicitGemmConv args;
  args.dtype = weight.dtype();
  args.input_dtype = weight.dtype();
  args.output_dtype = weight.dtype();
  args.weight = weight.raw_data();
  args.bias = bias.defined() ? bias.raw_data() : nullptr;
  args.batch = batch;
  args.in_channels = weight.size(1);
  args.in_steps = in_steps;
  args.out_channels = weight.size(0);
  args.out_steps = out_steps;
  args.kernel = weight.size(2);
  args.padding = p.padding;
  args.dilation = p.dilation;
  args.input_leaky_relu = slope.has_value();
  args.input_slope = slope.value_or(0.0f);
  return args;
}

size_t transposed_input_bytes(const Tensor& weight, const Conv1dParams& p, int64_t batch,
                              int64_t out_steps) {
  return static_cast<size_t>(cuda::implicit_gemm_transposed_input_elements(
             batch, weight.size(1), out_steps, weight.size(2), p.dilation)) *
         dtype_size(weight.dtype());
}

size_t arranged_weight_bytes(const Tensor& weight) {
  return static_cast<size_t>(cuda::implicit_gemm_arranged_weight_elements(
             weight.size(0), weight.size(1), weight.size(2))) *
         dtype_size(weight.dtype());
}

}  // namespace

bool CudaBackend::fuses_conv1d(const Tensor& x, const Tensor& weight, DType out_dtype,
                               const Conv1dParams& p, bool weight_arranged) const {
  return own_convolutions() && x.dim() == 3 &&
         implicit_gemm_takes(x.dtype(), x.size(0), x.size(2), weight, out_dtype, p,
                             weight_arranged);
}

void CudaBackend::fused_conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                               const ConvFusion& fusion, Tensor& out, const Conv1dParams& p,
                               const KernelScratch& scratch) {
  const char* op = "conv1d";
  const Tensor* residual = fusion.residual;
  const Tensor* weight_arranged = fusion.arranged_weight;
  assert(fuses_conv1d(x, weight, out.dtype(), p, weight_arranged != nullptr));
  assert(residual == nullptr || (residual->shape() == out.shape() && residual->is_contiguous()));
  const ScratchBuffer arranged =
      take(scratch, weight_arranged != nullptr ? 0 : arranged_weight_bytes(weight));
  const ScratchBuffer transposed =
      take(scratch, transposed_input_bytes(weight, p, x.size(0), out.size(2)));
  if (scratch.planning()) return;
  const OpScope scope = open(op);
  cuda::ImplicitGemmConv args = implicit_gemm_args(weight, bias, p, x.size(0), x.size(2),
                                                   out.size(2), fusion.input_leaky_relu);
  args.input_dtype = x.dtype();
  args.output_dtype = out.dtype();
  args.x = x.raw_data();
  args.arranged_weight = weight_arranged != nullptr ? weight_arranged->raw_data() : arranged.data();
  args.weight_arranged = weight_arranged != nullptr;
  args.transposed_input = transposed.data();
  args.residual = residual != nullptr ? residual->raw_data() : nullptr;
  args.out = out.raw_data();
  args.allow_wgmma = convolution_path_ == ConvolutionPath::kWgmma;
  cuda::implicit_gemm_conv1d(args, handles_->stream, op);
}

bool CudaBackend::fuses_conv1d_pair(const Tensor& x, const Conv1dPair& pair,
                                    DType out_dtype) const {
  // The mma.sync kernel's time-major layout passes between the two; under VOXD_CUDA_CONV=wgmma
  // they run as two convolutions, so that the wgmma kernel takes each.
  if (convolution_path_ != ConvolutionPath::kAuto || x.dim() != 3) return false;
  const Tensor& first = *pair.first_weight;
  return pair_kernel_takes(x.size(0), pair) &&
         implicit_gemm_runs(x.dtype(), first, first.dtype(), pair.first) &&
         implicit_gemm_runs(first.dtype(), *pair.second_weight, out_dtype, pair.second);
}

void CudaBackend::fused_conv1d_pair(const Tensor& x, const Conv1dPair& pair, Tensor& out,
                                    const KernelScratch& scratch) {
  assert(fuses_conv1d_pair(x, pair, out.dtype()));
  run_conv1d_pair(x, pair, out, /*rows=*/false, scratch);
}

bool CudaBackend::fuses_conv1d_pair_rows(const Tensor& x, const Conv1dPair& pair,
                                         DType out_dtype) const {
  // The mma.sync kernel copies its windows from the rows (16 channels a stage) and writes rows
  // of 8 channels a vector, in the weights' dtype.
  if (convolution_path_ != ConvolutionPath::kAuto || x.dim() != 3) return false;
  const Tensor& first = *pair.first_weight;
  const Tensor& second = *pair.second_weight;
  return x.dtype() == first.dtype() && out_dtype == first.dtype() && x.size(2) % 16 == 0 &&
         second.dim() == 3 && second.size(0) % 8 == 0 && pair_kernel_takes(x.size(0), pair) &&
         implicit_gemm_runs(x.dtype(), first, first.dtype(), pair.first) &&
         implicit_gemm_runs(first.dtype(), second, out_dtype, pair.second);
}

int64_t CudaBackend::arranged_conv1d_weight_elements(const Tensor& weight) const {
  const bool half = weight.dtype() == DType::F16 || weight.dtype() == DType::BF16;
  if (convolution_path_ != ConvolutionPath::kAuto || !half || weight.dim() != 3) return 0;
  return cuda::implicit_gemm_arranged_weight_elements(weight.size(0), weight.size(1),
                                                      weight.size(2));
}

void CudaBackend::arrange_conv1d_weight(const Tensor& weight, Tensor& arranged,
                                        const KernelScratch& scratch) {
  const char* op = "arrange_conv1d_weight";
  assert(arranged.numel() == arranged_conv1d_weight_elements(weight) && weight.is_contiguous());
  if (scratch.planning()) return;
  const OpScope scope = open(op);
  cuda::ImplicitGemmConv args;
  args.dtype = weight.dtype();
  args.weight = weight.raw_data();
  args.arranged_weight = arranged.raw_data();
  args.out_channels = weight.size(0);
  args.in_channels = weight.size(1);
  args.kernel = weight.size(2);
  cuda::implicit_gemm_arrange_weight(args, handles_->stream, op);
}

void CudaBackend::fused_conv1d_pair_rows(const Tensor& x, const Conv1dPair& pair, Tensor& out,
                                         const KernelScratch& scratch) {
  assert(fuses_conv1d_pair_rows(x, pair, out.dtype()));
  run_conv1d_pair(x, pair, out, /*rows=*/true, scratch);
}

void CudaBackend::run_conv1d_pair(const Tensor& x, const Conv1dPair& pair, Tensor& out, bool rows,
                                  const KernelScratch& scratch) {
  const char* op = rows ? "conv1d_pair_rows" : "conv1d_pair";
  const Tensor& w1 = *pair.first_weight;
  const Tensor& w2 = *pair.second_weight;
  const int64_t batch = x.size(0);
  const int64_t steps = x.size(rows ? 1 : 2);
  // One buffer for the weights not arranged when the model loaded (Conv1dPair::first_arranged):
  // the second's is written after the first ran. The first's time-major input is also where rows
  // of x off 16 bytes are copied to be read.
  const auto arranging = [](const Tensor* arranged, const Tensor& weight) {
    return arranged != nullptr ? size_t{0} : arranged_weight_bytes(weight);
  };
  const ScratchBuffer arranged = take(
      scratch, std::max(arranging(pair.first_arranged, w1), arranging(pair.second_arranged, w2)));
  // On chip (rows in and out, both weights arranged, V1's 32- and 64-channel stages) the
  // intermediate never leaves the multiprocessor: no time-major input for the second.
  const bool on_chip =
      rows && pair.first_arranged != nullptr && pair.second_arranged != nullptr &&
      cuda::implicit_gemm_pair_on_chip(w1.size(1), w1.size(0), w2.size(0), w1.size(2),
                                       pair.first.dilation, w2.size(2), pair.second.dilation);
  const ScratchBuffer first_input =
      take(scratch, rows ? x.nbytes() : transposed_input_bytes(w1, pair.first, batch, steps));
  const ScratchBuffer second_input =
      take(scratch, on_chip ? 0 : transposed_input_bytes(w2, pair.second, batch, steps));
  if (scratch.planning()) return;
  const OpScope scope = open(op);
  const auto side = [&](const Tensor& weight, const Tensor* bias, const Conv1dParams& p,
                        const Tensor* weight_arranged, const ScratchBuffer& input) {
    cuda::ImplicitGemmConv args =
        implicit_gemm_args(weight, bias ? *bias : Tensor(), p, batch, steps, steps, pair.slope);
    args.weight_arranged = weight_arranged != nullptr;
    args.arranged_weight =
        weight_arranged != nullptr ? weight_arranged->raw_data() : arranged.data();
    args.transposed_input = input.data();
    return args;
  };
  cuda::ImplicitGemmConv first =
      side(w1, pair.first_bias, pair.first, pair.first_arranged, first_input);
  first.input_dtype = x.dtype();
  first.x = x.raw_data();
  if (rows) {
    first.time_major_input = true;
    if (reinterpret_cast<uintptr_t>(x.raw_data()) % 16 != 0) {
      VOXD_CUDA_CHECK(op, cudaMemcpyAsync(first_input.data(), x.raw_data(), x.nbytes(),
                                          cudaMemcpyDeviceToDevice, handles_->stream));
      first.x = first_input.data();
    }
  }
  cuda::ImplicitGemmConv second =
      side(w2, pair.second_bias, pair.second, pair.second_arranged, second_input);
  second.output_dtype = out.dtype();
  second.residual = pair.residual != nullptr ? pair.residual->raw_data() : nullptr;
  second.addend = pair.addend != nullptr ? pair.addend->raw_data() : nullptr;
  second.output_scale = pair.output_scale;
  second.output_leaky_relu = pair.output_slope.has_value();
  second.output_slope = pair.output_slope.value_or(0.0f);
  second.out = out.raw_data();
  second.time_major_output = rows;
  cuda::implicit_gemm_conv1d_pair(first, second, handles_->stream, op);
}

void CudaBackend::conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                   Tensor& out, const ConvTranspose1dParams& p,
                                   const KernelScratch& scratch) {
  const char* op = "conv_transpose1d";
  const DType dtype = x.dtype();
  const int64_t batch = x.size(0);
  const int64_t cin = x.size(1);
  const int64_t t_in = x.size(2);
  const int64_t cout_g = weight.size(1);
  const int64_t k = weight.size(2);
  const int64_t cout = cout_g * p.groups;
  const int64_t cin_g = cin / p.groups;
  const int64_t t_out = out.size(2);
  assert(out.shape() == (Shape{batch, cout, t_out}) && weight.size(0) == cin);
  if (out.numel() == 0) return;
  const int64_t ck = cout_g * k;
  const bool gemms = cin_g > 0 && ck > 0 && t_in > 0;
  if (convolution_path_ == ConvolutionPath::kCudnn && gemms) {
    cudnn_convolution(true, x, weight, bias, out, p.stride, p.padding, p.dilation, p.groups,
                      scratch, op);
    return;
  }
  // F32 columns [batch, cout_g·k, chunk] = W_gᵀ · x for a chunk of input steps, then gathered
  // into the output (col2im) with one rounding to the output dtype.
  const int64_t chunk = gemms ? std::clamp<int64_t>(kScratchElements / (batch * ck), 1,
                                                    std::min<int64_t>(t_in, INT_MAX))
                              : 0;
  const ScratchBuffer cols = take(scratch, static_cast<size_t>(batch * ck * chunk) * sizeof(float));
  const ScratchBuffer workspace = take(scratch, gemms ? kCublasWorkspaceBytes : 0);
  if (scratch.planning()) return;
  const OpScope scope = open(op);
  cudaStream_t stream = handles_->stream;
  fill_bias(bias, {0, 1, 0}, out, stream, op);
  if (!gemms) return;
  use_gemm_workspace(workspace, op);
  const cudaDataType type = cuda_type(dtype);
  for (int64_t g = 0; g < p.groups; ++g) {
    for (int64_t t0 = 0; t0 < t_in; t0 += chunk) {
      const int64_t tc = std::min(chunk, t_in - t0);
      // Row-major cols [ck, tc] = W_gᵀ [ck, cin_g] · x_g [cin_g, tc]; column-major colsᵀ =
      // x_gᵀ · W_g, with W_g row-major [cin_g, ck] read transposed.
      gemm(handles_->cublas, op, CUBLAS_OP_N, CUBLAS_OP_T, tc, ck, cin_g,
           {element(x, g * cin_g * t_in + t0), type, t_in, cin * t_in},
           {element(weight, g * cin_g * ck), type, ck, 0}, 0.0f, cols.data(), CUDA_R_32F, tc,
           ck * tc, batch);
      cuda::col2im_add(cols.as<float>(), batch, cout_g, k, t0, tc, p.stride, p.padding, p.dilation,
                       out.raw_data(), dtype, cout, g * cout_g, t_out, stream, op);
    }
  }
}

bool CudaBackend::runs_conv_transpose1d_rows(const Tensor& x, const Tensor& weight,
                                             const ConvTranspose1dParams& p) const {
  // As a stride-1 convolution of its phases on the mma.sync kernel, which reads the rows where
  // they lie (16-byte aligned) and writes rows.
  if (convolution_path_ != ConvolutionPath::kAuto || x.dim() != 3 || weight.dim() != 3 ||
      x.dtype() != weight.dtype() || x.size(0) > 65535 ||
      reinterpret_cast<uintptr_t>(x.raw_data()) % 16 != 0) {
    return false;
  }
  const auto polyphase = cuda::polyphase_of(p.stride, weight.size(2), p.padding, p.dilation,
                                            p.output_padding, p.groups);
  return polyphase && cuda::implicit_gemm_conv_transpose1d_rows_supported(
                          x.dtype(), x.size(2), weight.size(1), *polyphase);
}

int64_t CudaBackend::arranged_conv_transpose1d_elements(const Tensor& weight,
                                                        const ConvTranspose1dParams& p) const {
  if (convolution_path_ != ConvolutionPath::kAuto || weight.dim() != 3) return 0;
  const auto polyphase = cuda::polyphase_of(p.stride, weight.size(2), p.padding, p.dilation,
                                            p.output_padding, p.groups);
  if (!polyphase || !cuda::implicit_gemm_conv_transpose1d_rows_supported(
                        weight.dtype(), weight.size(0), weight.size(1), *polyphase)) {
    return 0;
  }
  return cuda::implicit_gemm_polyphase_elements(weight.size(0), weight.size(1), *polyphase);
}

void CudaBackend::arrange_conv_transpose1d_weight(const Tensor& weight, const Tensor& bias,
                                                  const ConvTranspose1dParams& p, Tensor& arranged,
                                                  const KernelScratch& scratch) {
  const char* op = "arrange_conv_transpose1d_weight";
  assert(arranged.numel() == arranged_conv_transpose1d_elements(weight, p));
  if (scratch.planning()) return;
  const OpScope scope = open(op);
  cuda::ImplicitGemmConv args;
  args.dtype = weight.dtype();
  args.weight = weight.raw_data();
  args.bias = bias.defined() ? bias.raw_data() : nullptr;
  args.arranged_weight = arranged.raw_data();
  args.in_channels = weight.size(0);
  args.out_channels = weight.size(1);
  cuda::implicit_gemm_arrange_polyphase(args,
                                        *cuda::polyphase_of(p.stride, weight.size(2), p.padding,
                                                            p.dilation, p.output_padding, p.groups),
                                        handles_->stream, op);
}

void CudaBackend::conv_transpose1d_rows(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                        Tensor& out, const ConvTranspose1dParams& p,
                                        const Tensor* arranged_weight,
                                        const KernelScratch& scratch) {
  const char* op = "conv_transpose1d_rows";
  assert(runs_conv_transpose1d_rows(x, weight, p));
  const cuda::Polyphase polyphase = *cuda::polyphase_of(p.stride, weight.size(2), p.padding,
                                                        p.dilation, p.output_padding, p.groups);
  const int64_t cout = weight.size(1);
  const size_t arranging = arranged_weight != nullptr
                               ? 0
                               : static_cast<size_t>(cuda::implicit_gemm_polyphase_elements(
                                     x.size(2), cout, polyphase)) *
                                     dtype_size(x.dtype());
  const ScratchBuffer arranged = take(scratch, arranging);
  if (scratch.planning()) return;
  const OpScope scope = open(op);
  cuda::ImplicitGemmConv args;
  args.dtype = x.dtype();
  args.input_dtype = x.dtype();
  args.output_dtype = x.dtype();
  args.x = x.raw_data();
  args.weight = weight.raw_data();
  args.weight_arranged = arranged_weight != nullptr;
  args.arranged_weight = arranged_weight != nullptr ? arranged_weight->raw_data() : arranged.data();
  args.bias = bias.defined() ? bias.raw_data() : nullptr;
  args.out = out.raw_data();
  args.batch = x.size(0);
  args.in_channels = x.size(2);
  args.in_steps = x.size(1);
  args.out_channels = cout;
  cuda::implicit_gemm_conv_transpose1d_rows(args, polyphase, handles_->stream, op);
}

void CudaBackend::layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                             Tensor& out) {
  const char* op = "layer_norm";
  const OpScope scope = open(op);
  assert(x.dim() == 2 && out.shape() == x.shape());
  cuda::layer_norm(x.raw_data(), gamma.raw_data(), beta.raw_data(), out.raw_data(), x.dtype(),
                   x.size(0), x.size(1), eps, handles_->stream, op);
}

void CudaBackend::add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& gamma,
                                 const Tensor& beta, float eps, Tensor& out) {
  const char* op = "add_layer_norm";
  const OpScope scope = open(op);
  assert(x.dim() == 2 && residual.shape() == x.shape() && out.shape() == x.shape());
  cuda::layer_norm(x.raw_data(), gamma.raw_data(), beta.raw_data(), out.raw_data(), x.dtype(),
                   x.size(0), x.size(1), eps, handles_->stream, op, residual.raw_data());
}

void CudaBackend::rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) {
  const char* op = "rms_norm";
  const OpScope scope = open(op);
  assert(x.dim() == 2 && out.shape() == x.shape());
  cuda::rms_norm(x.raw_data(), weight.raw_data(), out.raw_data(), x.dtype(), x.size(0), x.size(1),
                 eps, handles_->stream, op);
}

void CudaBackend::embedding(const Tensor& ids, const Tensor& table, Tensor& out,
                            const KernelScratch& scratch) {
  const char* op = "embedding";
  const int64_t n = ids.numel();
  const int64_t vocab = table.size(0);
  const int64_t c = table.size(1);
  assert(ids.is_contiguous() && out.shape() == (Shape{n, c}));
  const ScratchBuffer rows = take(scratch, static_cast<size_t>(n) * sizeof(int64_t));
  if (scratch.planning()) return;
  const OpScope scope = open(op);
  // Ids are checked on the host (device ids are copied back first), so a bad id throws here
  // with the same message as on the host backends.
  Tensor host_ids = ids;
  if (!ids.device().is_cpu()) {
    refuse_while_capturing(op, "reading device ids back to the host");
    host_ids = Tensor::empty(ids.shape(), ids.dtype());
    VOXD_CUDA_CHECK(op, handles_->download(host_ids.raw_data(), ids.raw_data(), ids.nbytes()));
  }
  const std::vector<int64_t> values = host_ids.to_int_vector();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = values[static_cast<size_t>(i)];
    if (id < 0 || id >= vocab) {
      throw Error("embedding: id " + std::to_string(id) + " at position " + std::to_string(i) +
                  " is outside the table's " + std::to_string(vocab) + " rows");
    }
  }
  upload(rows.data(), values.data(), rows.bytes(), op);
  cuda::gather_rows(table.raw_data(), vocab, rows.as<int64_t>(), out.raw_data(), table.dtype(), n,
                    c, handles_->stream, op);
}

void CudaBackend::gather_rows(const Tensor& table, const Tensor& rows, Tensor& out,
                              const KernelScratch& scratch) {
  const char* op = "gather_rows";
  const int64_t n = rows.numel();
  assert(rows.is_contiguous() && out.shape() == (Shape{n, table.size(1)}));
  const bool on_host = rows.device().is_cpu();
  const ScratchBuffer staged = take(scratch, on_host ? rows.nbytes() : 0);
  if (scratch.planning()) return;
  const OpScope scope = open(op);
  if (on_host) upload(staged.data(), rows.raw_data(), staged.bytes(), op);
  cuda::gather_rows(table.raw_data(), table.size(0),
                    on_host ? staged.as<int64_t>() : rows.data<int64_t>(), out.raw_data(),
                    table.dtype(), n, table.size(1), handles_->stream, op);
}

void CudaBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                            const AttentionParams& params, const KernelScratch& scratch) {
  const char* op = "attention";
  assert(out.shape() == q.shape() && k.shape() == v.shape());
  const int64_t batch = q.size(0);
  const int64_t tq = q.size(1);
  const int64_t heads = q.size(2);
  const int64_t dim = q.size(3);
  const DType dtype = q.dtype();
  if (out.numel() == 0) return;
  // Keys past every query's reach (a causal KV cache's unfilled rows) are left out of the gemms:
  // only the first tk of the k.size(1) rows are read, the longest length any query sees. Without
  // causality the lengths only mask: tk is the keys' shape, so that a step planned with its
  // padded length takes the same scratch, by the same path, whatever lengths it runs with (a
  // batch of shorter sentences took less, moving every later block off the plan, until one
  // overflowed the arena).
  const int64_t rows = k.size(1);
  int64_t tk = params.causal ? 0 : rows;
  for (int64_t b = 0; b < batch && params.causal; ++b) {
    const int64_t offset = params.query_offsets.empty() ? 0 : params.query_offsets[b];
    const int64_t seen =
        std::min(params.key_lengths.empty() ? rows : params.key_lengths[b], offset + tq);
    tk = std::max(tk, std::clamp<int64_t>(seen, 0, rows));
  }
  // Lengths on the device (a recorded step's) are read by the kernels: never by value.
  const bool device_lengths = params.key_length_tensor.defined();
  const int64_t* device_key_lengths =
      device_lengths ? params.key_length_tensor.data<int64_t>() : nullptr;
  if (tk > 0 && !device_lengths && cuda::decode_attention_fits(batch, tq, tk, dim)) {
    // A few queries per sequence (a decode step): one kernel, no scratch, no upload.
    if (scratch.planning()) return;
    const OpScope scope = open(op);
    cuda::SequenceValues key_lengths{};
    cuda::SequenceValues key_starts{};
    cuda::SequenceValues offsets{};
    for (int64_t b = 0; b < batch; ++b) {
      key_lengths.values[b] =
          params.key_lengths.empty() ? tk : std::clamp<int64_t>(params.key_lengths[b], 0, tk);
      key_starts.values[b] = params.key_starts.empty() ? 0 : params.key_starts[b];
      offsets.values[b] = params.query_offsets.empty() ? 0 : params.query_offsets[b];
    }
    cuda::decode_attention(q.raw_data(), k.raw_data(), v.raw_data(), out.raw_data(), dtype, batch,
                           tq, rows, heads, dim, tk, params.scale, key_lengths, key_starts, offsets,
                           params.causal, handles_->stream, op);
    return;
  }
  if (cuda::flash_attention_fits(dtype, batch, heads, dim)) {
    // Every query at once in one kernel, the lengths by value (or uploaded past kInline
    // sequences).
    const size_t list_bytes = sequence_values_bytes(static_cast<size_t>(batch));
    const ScratchBuffer length_list = take(scratch, list_bytes);
    const ScratchBuffer start_list = take(scratch, list_bytes);
    const ScratchBuffer offset_list = take(scratch, list_bytes);
    if (scratch.planning()) return;
    const OpScope scope = open(op);
    const auto per_sequence = [&](const std::vector<int64_t>& given, int64_t otherwise) {
      return given.empty() ? std::vector<int64_t>(static_cast<size_t>(batch), otherwise) : given;
    };
    cuda::SequenceValues key_lengths{};
    if (device_lengths) {
      key_lengths.device = device_key_lengths;
    } else {
      key_lengths = sequence_values(per_sequence(params.key_lengths, rows), length_list, op);
    }
    cuda::flash_attention(q.raw_data(), k.raw_data(), v.raw_data(), out.raw_data(), dtype, batch,
                          tq, rows, heads, dim, params.scale, key_lengths,
                          sequence_values(per_sequence(params.key_starts, 0), start_list, op),
                          sequence_values(per_sequence(params.query_offsets, 0), offset_list, op),
                          params.causal, handles_->stream, op);
    return;
  }
  // All sequences at once, per chunk of queries: per head, scores = scale · q·kᵀ (F32) over all
  // tk keys as one gemm batched over the sequences, then one masked softmax for every row (each
  // sequence's own key length; padded keys get probability 0), then per head out = probabilities
  // · v batched the same way: 2·heads + 1 launches per chunk whatever the batch (a loop over the
  // sequences made a batch of 64 short sentences launch-bound).
  const int64_t queries = std::clamp<int64_t>(
      kScratchElements / std::max<int64_t>(batch * heads * tk, 1), 1, std::max<int64_t>(tq, 1));
  const size_t score_count = static_cast<size_t>(batch * heads * queries * tk);
  const ScratchBuffer scores = take(scratch, tk == 0 ? 0 : score_count * sizeof(float));
  const ScratchBuffer probs =
      take(scratch, tk == 0 || dtype == DType::F32 ? 0 : score_count * dtype_size(dtype));
  const ScratchBuffer workspace = take(scratch, tk == 0 ? 0 : kCublasWorkspaceBytes);
  const ScratchBuffer lists = take(scratch, tk == 0 ? 0 : 3 * batch * sizeof(int64_t));
  if (scratch.planning()) return;
  const OpScope scope = open(op);
  cudaStream_t stream = handles_->stream;
  const uint64_t nan_bits =
      dtype == DType::F32 ? 0x7fc00000u : (dtype == DType::F16 ? 0x7e00u : 0x7fc0u);
  if (tk == 0) {  // no key to attend to: NaN, as the host backends give
    cuda::fill_pattern(out.raw_data(), static_cast<int>(dtype_size(dtype)), nan_bits, out.numel(),
                       stream, op);
    return;
  }
  // key_lengths, key_starts, query offsets: one array of 3·batch.
  std::vector<int64_t> host_lists(static_cast<size_t>(3 * batch), 0);
  for (int64_t b = 0; b < batch; ++b) {
    host_lists[static_cast<size_t>(b)] =
        params.key_lengths.empty() ? tk : std::clamp<int64_t>(params.key_lengths[b], 0, tk);
    if (!params.key_starts.empty())
      host_lists[static_cast<size_t>(batch + b)] = params.key_starts[b];
    if (!params.query_offsets.empty()) {
      host_lists[static_cast<size_t>(2 * batch + b)] = params.query_offsets[b];
    }
  }
  if (device_lengths) {  // the lengths are where they are; starts and offsets 0
    VOXD_CUDA_CHECK(op, cudaMemsetAsync(lists.data(), 0, lists.bytes(), stream));
  } else {
    upload(lists.data(), host_lists.data(), lists.bytes(), op);
  }
  const int64_t* key_lengths = device_lengths ? device_key_lengths : lists.as<int64_t>();
  const int64_t* key_starts = lists.as<int64_t>() + batch;
  const int64_t* offsets = key_starts + batch;
  const cudaDataType type = cuda_type(dtype);
  const int64_t row = heads * dim;  // elements between time steps (rows · row between sequences)
  use_gemm_workspace(workspace, op);
  void* probabilities = dtype == DType::F32 ? scores.data() : probs.data();
  for (int64_t q0 = 0; q0 < tq; q0 += queries) {
    const int64_t qc = std::min(queries, tq - q0);
    // Scores and probabilities of sequence b, head h: [qc, tk] row-major at (b·heads + h)·qc·tk.
    const int64_t per_sequence = heads * qc * tk;
    for (int64_t h = 0; h < heads; ++h) {
      // Column-major scoresᵀ [tk, qc] = k_hᵀ-as-stored · q_h (ld heads·dim), per sequence.
      gemm(handles_->cublas, op, CUBLAS_OP_T, CUBLAS_OP_N, tk, qc, dim,
           {element(k, h * dim), type, row, rows * row},
           {element(q, q0 * row + h * dim), type, row, tq * row}, 0.0f,
           scores.as<float>() + h * qc * tk, CUDA_R_32F, tk, per_sequence, batch, params.scale);
    }
    cuda::masked_softmax(scores.as<float>(), probabilities, dtype, batch * heads * qc, heads * qc,
                         qc, tk, key_lengths, key_starts, offsets, params.causal, q0, stream, op);
    for (int64_t h = 0; h < heads; ++h) {
      // Column-major out_hᵀ [dim, qc] = v_hᵀ [dim, tk] · probsᵀ [tk, qc], per sequence.
      gemm(
          handles_->cublas, op, CUBLAS_OP_N, CUBLAS_OP_N, dim, qc, tk,
          {element(v, h * dim), type, row, rows * row},
          {static_cast<char*>(probabilities) + static_cast<size_t>(h * qc * tk) * dtype_size(dtype),
           type, tk, per_sequence},
          0.0f, element(out, q0 * row + h * dim), type, row, tq * row, batch);
    }
  }
}

void CudaBackend::zero_beyond_lengths(Tensor& x, const std::vector<int64_t>& lengths,
                                      const KernelScratch& scratch) {
  const char* op = "zero_beyond_lengths";
  assert(x.dim() == 3 && static_cast<int64_t>(lengths.size()) == x.size(0));
  const ScratchBuffer device_lengths = take(scratch, lengths.size() * sizeof(int64_t));
  if (scratch.planning()) return;
  // No row past its length (a batch without padding): nothing to zero, no upload, no launch.
  // The scratch is taken either way, so a step planned with full lengths runs padded ones.
  if (std::all_of(lengths.begin(), lengths.end(), [&](int64_t n) { return n >= x.size(1); })) {
    return;
  }
  const OpScope scope = open(op);
  upload(device_lengths.data(), lengths.data(), device_lengths.bytes(), op);
  cuda::zero_beyond_lengths(x.raw_data(), x.dtype(), device_lengths.as<int64_t>(), x.size(0),
                            x.size(1), x.size(2), handles_->stream, op);
}

void CudaBackend::zero_beyond_device_lengths(Tensor& x, const Tensor& lengths,
                                             const KernelScratch& scratch) {
  const char* op = "zero_beyond_lengths";
  assert(x.dim() == 3 && lengths.numel() == x.size(0) && !lengths.device().is_cpu());
  if (scratch.planning()) return;
  const OpScope scope = open(op);
  cuda::zero_beyond_lengths(x.raw_data(), x.dtype(), lengths.data<int64_t>(), x.size(0), x.size(1),
                            x.size(2), handles_->stream, op);
}

void CudaBackend::length_regulate(const Tensor& x,
                                  const std::vector<std::vector<int64_t>>& durations, Tensor& out,
                                  const KernelScratch& scratch) {
  const char* op = "length_regulate";
  const int64_t batch = x.size(0);
  const int64_t t = x.size(1);
  const int64_t c = x.size(2);
  const int64_t frames = out.size(1);
  assert(out.shape() == (Shape{batch, frames, c}));
  // Source row of every output frame (−1: padding), built on the host and gathered on the device.
  const std::vector<int64_t> rows = ops::length_regulation_rows(durations, t, frames);
  const ScratchBuffer device_rows = take(scratch, rows.size() * sizeof(int64_t));
  if (scratch.planning()) return;
  const OpScope scope = open(op);
  upload(device_rows.data(), rows.data(), device_rows.bytes(), op);
  cuda::gather_rows(x.raw_data(), batch * t, device_rows.as<int64_t>(), out.raw_data(), x.dtype(),
                    batch * frames, c, handles_->stream, op);
}

void CudaBackend::bucketize(const Tensor& x, const Tensor& boundaries, Tensor& out) {
  const char* op = "bucketize";
  const OpScope scope = open(op);
  assert(out.dtype() == DType::I64 && out.shape() == x.shape());
  cuda::bucketize(x.data<float>(), x.numel(), boundaries.data<float>(), boundaries.numel(),
                  out.data<int64_t>(), handles_->stream, op);
}

void CudaBackend::rope(const Tensor& x, const Tensor& start_positions, float theta, Tensor& out,
                       const KernelScratch& scratch) {
  const char* op = "rope";
  const int64_t batch = x.size(0);
  const int64_t dim = x.size(3);
  const bool empty = x.numel() == 0;
  const bool on_host = start_positions.device().is_cpu();
  const ScratchBuffer positions =
      take(scratch, empty || !on_host ? 0 : sequence_values_bytes(static_cast<size_t>(batch)));
  const ScratchBuffer frequencies =
      take(scratch, empty ? 0 : rope_frequency_bytes(static_cast<size_t>(dim / 2)));
  if (scratch.planning() || empty) return;
  const OpScope scope = open(op);
  cuda::SequenceValues starts{};
  if (on_host) {
    const int64_t* first = start_positions.data<int64_t>();
    starts = sequence_values(std::vector<int64_t>(first, first + batch), positions, op);
  } else {
    starts.device = start_positions.data<int64_t>();
  }
  cuda::rope(x.raw_data(), out.raw_data(), x.dtype(), starts,
             rope_frequency_table(rope_frequencies(theta, dim), frequencies, op), batch, x.size(1),
             x.size(2), dim, handles_->stream, op);
}

void CudaBackend::write_rows(Tensor& cache, const Tensor& rows, const std::vector<int64_t>& offsets,
                             const KernelScratch& scratch) {
  const char* op = "write_rows";
  const int64_t batch = cache.size(0);
  const ScratchBuffer device_offsets =
      take(scratch, rows.numel() == 0 ? 0 : sequence_values_bytes(offsets.size()));
  if (scratch.planning() || rows.numel() == 0) return;
  const OpScope scope = open(op);
  const int64_t steps = rows.size(1);
  const int64_t inner = rows.numel() / (batch * steps);
  cuda::write_rows(cache.raw_data(), rows.raw_data(), static_cast<int>(dtype_size(cache.dtype())),
                   sequence_values(offsets, device_offsets, op), batch, steps, cache.size(1), inner,
                   handles_->stream, op);
}

cuda::PageTable CudaBackend::page_table_on_device(const Tensor& page_table, const Tensor& positions,
                                                  const Tensor& key_starts, int64_t page_size,
                                                  int64_t pages, const ScratchBuffer& buffer,
                                                  const char* op) const {
  // Tables on the host go up through the staging ring into `buffer` (entries, positions, then
  // key starts).
  size_t offset = 0;
  const auto place = [&](const Tensor& t) -> const int64_t* {
    if (!t.defined()) return nullptr;
    if (!t.device().is_cpu()) return t.data<int64_t>();
    auto* at = reinterpret_cast<int64_t*>(buffer.as<char>() + offset);
    upload(at, t.raw_data(), t.nbytes(), op);
    offset += t.nbytes();
    return at;
  };
  const int64_t* entries = place(page_table);
  const int64_t* on_device_positions = place(positions);
  const int64_t* starts = place(key_starts);
  return {entries, on_device_positions, starts, page_table.size(1), page_size, pages};
}

size_t CudaBackend::page_table_bytes(const Tensor& page_table, const Tensor& positions,
                                     const Tensor& key_starts) {
  size_t bytes = 0;
  for (const Tensor* t : {&page_table, &positions, &key_starts}) {
    if (t->defined() && t->device().is_cpu()) bytes += t->nbytes();
  }
  return bytes;
}

void CudaBackend::paged_attention(const Tensor& q, const Tensor& k_pages, const Tensor& v_pages,
                                  const Tensor& page_table, const Tensor& positions,
                                  const Tensor& key_starts, float scale, Tensor& out,
                                  const KernelScratch& scratch) {
  const char* op = "paged_attention";
  const int64_t page_size = k_pages.size(1);
  const int64_t capacity = page_table.size(1) * page_size;
  const int64_t batch = q.size(0);
  const int64_t heads = q.size(2);
  const int64_t dim = q.size(3);
  // One query per sequence (a decode step) is split over blocks by key ranges; more go through
  // the one-block-per-query kernel, which holds each query's scores in shared memory.
  const bool split = q.size(1) == 1 && cuda::split_decode_attention_fits(q.dtype(), dim);
  if (!split && !cuda::paged_attention_fits(capacity, dim)) {
    fail(op, "a page table of " + std::to_string(capacity) +
                 " positions is more than the kernel's shared memory holds the scores of");
  }
  const int64_t splits = split ? cuda::split_decode_splits(batch, heads) : 0;
  const ScratchBuffer tables = take(scratch, page_table_bytes(page_table, positions, key_starts));
  const ScratchBuffer partials =
      take(scratch, split ? cuda::split_decode_scratch_bytes(batch, heads, dim, splits) : 0);
  if (scratch.planning() || out.numel() == 0) return;
  const OpScope scope = open(op);
  const cuda::PageTable table = page_table_on_device(page_table, positions, key_starts, page_size,
                                                     k_pages.size(0), tables, op);
  if (split) {
    cuda::split_decode_attention(q.raw_data(), k_pages.raw_data(), v_pages.raw_data(),
                                 out.raw_data(), q.dtype(), batch, heads, dim, table, scale, splits,
                                 partials.as<float>(), handles_->stream, op);
    return;
  }
  cuda::paged_attention(q.raw_data(), k_pages.raw_data(), v_pages.raw_data(), out.raw_data(),
                        q.dtype(), batch, q.size(1), heads, dim, table, scale, handles_->stream,
                        op);
}

void CudaBackend::write_pages(Tensor& pages, const Tensor& rows, const Tensor& page_table,
                              const Tensor& positions, const KernelScratch& scratch) {
  const char* op = "write_pages";
  const ScratchBuffer tables =
      take(scratch, rows.numel() == 0 ? 0 : page_table_bytes(page_table, positions, Tensor{}));
  if (scratch.planning() || rows.numel() == 0) return;
  const OpScope scope = open(op);
  const int64_t batch = rows.size(0);
  const int64_t steps = rows.size(1);
  cuda::write_pages(pages.raw_data(), rows.raw_data(), static_cast<int>(dtype_size(pages.dtype())),
                    batch, steps, rows.numel() / (batch * steps),
                    page_table_on_device(page_table, positions, Tensor{}, pages.size(1),
                                         pages.size(0), tables, op),
                    handles_->stream, op);
}

void CudaBackend::add_rms_norm(const Tensor& x, const Tensor& delta, const Tensor& weight,
                               float eps, Tensor& sum, Tensor& normed) {
  const char* op = "add_rms_norm";
  const OpScope scope = open(op);
  assert(x.dim() == 2 && delta.shape() == x.shape() && sum.shape() == x.shape());
  cuda::add_rms_norm(x.raw_data(), x.dtype(), delta.raw_data(), delta.dtype(), weight.raw_data(),
                     sum.raw_data(), normed.raw_data(), normed.dtype(), x.size(0), x.size(1), eps,
                     handles_->stream, op);
}

void CudaBackend::swiglu(const Tensor& gate_up, Tensor& out) {
  const char* op = "swiglu";
  const OpScope scope = open(op);
  assert(gate_up.dim() == 2 && out.size(1) * 2 == gate_up.size(1));
  cuda::swiglu(gate_up.raw_data(), out.raw_data(), out.dtype(), out.size(0), out.size(1),
               handles_->stream, op);
}

void CudaBackend::qkv_to_pages(const Tensor& qkv, Tensor& k_pages, Tensor& v_pages,
                               const Tensor& page_table, const Tensor& positions, float theta,
                               Tensor& q_out, const KernelScratch& scratch) {
  const char* op = "qkv_to_pages";
  const int64_t dim = qkv.size(4);
  const bool empty = qkv.numel() == 0;
  const ScratchBuffer tables =
      take(scratch, empty ? 0 : page_table_bytes(page_table, positions, Tensor{}));
  const ScratchBuffer frequencies =
      take(scratch, empty ? 0 : rope_frequency_bytes(static_cast<size_t>(dim / 2)));
  if (scratch.planning() || empty) return;
  const OpScope scope = open(op);
  cuda::qkv_to_pages(qkv.raw_data(), k_pages.raw_data(), v_pages.raw_data(), q_out.raw_data(),
                     qkv.dtype(), qkv.size(0), qkv.size(1), qkv.size(3), dim,
                     rope_frequency_table(rope_frequencies(theta, dim), frequencies, op),
                     page_table_on_device(page_table, positions, Tensor{}, k_pages.size(1),
                                          k_pages.size(0), tables, op),
                     handles_->stream, op);
}

void CudaBackend::istft(const Tensor& real, const Tensor& imag, const Tensor& window, int64_t hop,
                        Tensor& out, const KernelScratch& scratch) {
  const char* op = "istft";
  const int64_t batch = real.size(0);
  const int64_t bins = real.size(1);
  const int64_t frames = real.size(2);
  const int64_t n_fft = window.size(0);
  const int64_t length = out.size(1);
  if (batch == 0) return;
  // Whole batch items per chunk: their frames' spectra are packed for cuFFT, transformed into
  // frame signals, then overlap-added into their outputs. A chunk's transforms go through cuFFT
  // in pieces of powers of two (its count's binary digits), so that every shape a server meets
  // uses the same 13 plans, all made the first time this FFT size is met: a new batch or chunk
  // length makes no plan (tens of milliseconds on the first ones) in the middle of serving.
  const int64_t items = std::clamp<int64_t>(kFftFrames / frames, 1, batch);
  const int64_t largest_piece = static_cast<int64_t>(
      std::bit_floor(static_cast<uint64_t>(std::min(items * frames, kFftFrames))));
  size_t work = 0;
  if (!plan_only()) make_current(op);  // the plans are made on the device, in a planning pass too
  for (int64_t piece = 1; piece <= kFftFrames; piece *= 2) {
    const size_t bytes = plan_only() ? plan_only_fft_work_bytes(n_fft, piece)
                                     : handles_->inverse_fft(n_fft, piece, op).work_bytes;
    if (piece <= largest_piece) work = std::max(work, bytes);
  }
  const ScratchBuffer spectrum =
      take(scratch, static_cast<size_t>(items * frames * bins) * 2 * sizeof(float));
  const ScratchBuffer signal = take(scratch, static_cast<size_t>(items * frames * n_fft) * 4);
  const ScratchBuffer device_window = take(scratch, static_cast<size_t>(n_fft) * sizeof(float));
  // cuFFT's work area is 256-byte aligned in the allocators voxd uses; it asks for no more.
  const ScratchBuffer work_area = take(scratch, work);
  if (scratch.planning()) return;
  const OpScope scope = open(op);
  cudaStream_t stream = handles_->stream;
  upload(device_window.data(), window.raw_data(), device_window.bytes(), op);
  for (int64_t item0 = 0; item0 < batch; item0 += items) {
    const int64_t count = std::min(items, batch - item0);
    cuda::pack_spectrum(real.data<float>(), imag.data<float>(), spectrum.data(), item0, count, bins,
                        frames, n_fft, stream, op);
    const int64_t transforms = count * frames;
    for (int64_t first = 0; first < transforms;) {
      const auto piece = static_cast<int64_t>(
          std::bit_floor(static_cast<uint64_t>(std::min(transforms - first, kFftFrames))));
      Handles::FftPlan& plan = handles_->inverse_fft(n_fft, piece, op);
      VOXD_CUDA_CHECK(op, cufftSetWorkArea(plan.handle, work_area.data()));
      VOXD_CUDA_CHECK(op, cufftExecC2R(plan.handle, spectrum.as<cufftComplex>() + first * bins,
                                       signal.as<cufftReal>() + first * n_fft));
      first += piece;
    }
    cuda::overlap_add(signal.as<float>(), device_window.as<float>(),
                      out.data<float>() + item0 * length, count, frames, n_fft, hop, length, stream,
                      op);
  }
}

void CudaBackend::sample_tokens(const Tensor& logits, const Tensor& history,
                                const std::vector<TokenDraw>& draws, Tensor& tokens,
                                const KernelScratch& scratch) {
  const char* op = "sample_tokens";
  const int64_t rows = logits.size(0);
  const int64_t vocab = logits.size(1);
  const bool history_on_host = history.device().is_cpu();
  // The draws, a host history and (for long rows) the rows being filtered go through scratch.
  const ScratchBuffer device_draws = take(scratch, draws.size() * sizeof(TokenDraw));
  const ScratchBuffer device_history = take(scratch, history_on_host ? history.nbytes() : 0);
  const ScratchBuffer rows_scratch =
      take(scratch, vocab > cuda::kSharedRowTokens ? logits.nbytes() : 0);
  if (scratch.planning()) return;
  const OpScope scope = open(op);
  upload(device_draws.data(), draws.data(), device_draws.bytes(), op);
  const int64_t* history_rows = history.data<int64_t>();
  if (history_on_host && history.numel() > 0) {
    upload(device_history.data(), history.raw_data(), history.nbytes(), op);
    history_rows = device_history.as<int64_t>();
  }
  cuda::sample_tokens(
      {.logits = logits.data<float>(),
       .history = history_rows,
       .draws = device_draws.as<TokenDraw>(),
       .rows_scratch = rows_scratch.bytes() > 0 ? rows_scratch.as<float>() : nullptr,
       .tokens = tokens.data<int64_t>(),
       .rows = rows,
       .vocab = vocab,
       .window = history.size(1)},
      handles_->stream, op);
}

void CudaBackend::lstm(const Tensor& x_gates, const Tensor& w_hh, Tensor& h, Tensor& c,
                       const std::vector<int64_t>& lengths, bool reverse, Tensor& out,
                       const KernelScratch& scratch) {
  const char* op = "lstm";
  const int64_t batch = x_gates.size(0);
  const int64_t steps = x_gates.size(1);
  // One block row per batch item, the previous h of one in 48 KiB of shared memory.
  if (batch > 65535 || w_hh.size(1) > 12 * 1024) {
    throw Error(name() + ": lstm takes at most 65535 batch items and 12288 hidden units, got " +
                std::to_string(batch) + " and " + std::to_string(w_hh.size(1)));
  }
  std::vector<int64_t> all_lengths = lengths;
  if (all_lengths.empty()) all_lengths.assign(static_cast<size_t>(batch), steps);
  const ScratchBuffer device_lengths = take(scratch, all_lengths.size() * sizeof(int64_t));
  const ScratchBuffer h_scratch = take(scratch, h.nbytes());
  if (scratch.planning()) return;
  const OpScope scope = open(op);
  upload(device_lengths.data(), all_lengths.data(), device_lengths.bytes(), op);
  cuda::lstm({.x_gates = x_gates.raw_data(),
              .w_hh = w_hh.raw_data(),
              .h = h.data<float>(),
              .h_scratch = h_scratch.as<float>(),
              .c = c.data<float>(),
              .out = out.raw_data(),
              .lengths = device_lengths.as<int64_t>(),
              .dtype = x_gates.dtype(),
              .batch = batch,
              .steps = steps,
              .hidden = w_hh.size(1),
              .longest = *std::max_element(all_lengths.begin(), all_lengths.end()),
              .reverse = reverse},
             handles_->stream, op);
}

}  // namespace voxd
