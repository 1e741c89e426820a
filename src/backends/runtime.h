// A backend together with the memory its tensors live in: a CachingAllocator over the device's
// memory (cudaMalloc for "cuda", the host heap for "cpu" and "reference") under an optional hard
// limit, contexts for loading weights and for running, an NVML reader on NVIDIA devices, and the
// memory summary that shows weights, workspaces, cache and free memory apart. Tools and the server
// build one of these instead of pairing a backend with an allocator by hand (docs/memory.md).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/backend.h"
#include "core/caching_allocator.h"
#include "core/memory_limit.h"
#include "core/memory_source.h"
#include "core/memory_summary.h"
#include "core/ops.h"

namespace voxd {

class NvmlReader;

struct RuntimeOptions {
  std::string backend = "cpu";  // a make_backend() name
  int threads = 0;              // cpu backend threads (0: all cores)
  // The most the allocator may reserve (bytes or a fraction of the device's memory); none when
  // empty. Must not exceed the device's memory.
  std::optional<MemoryAmount> memory_limit = std::nullopt;
  // Blocks of this size or more are never split (PyTorch's max_split_size_mb); must be above
  // 2 MiB.
  std::optional<MemoryAmount> max_split_size = std::nullopt;
  // Where the allocator's segments come from and the device's memory is read; the backend's
  // device when null. Tests give a HostMemorySource of a fixed capacity: a small device from
  // which they take memory as another process would, by reserving it themselves.
  std::shared_ptr<MemorySource> source = nullptr;
};

class DeviceRuntime {
 public:
  // Opens the backend and its device's memory. Throws voxd::InputError for an unknown backend, a
  // missing device, a limit above the device's memory or a max_split_size of 2 MiB or less.
  explicit DeviceRuntime(const RuntimeOptions& options);
  // Every tensor from the contexts must be gone by now.
  ~DeviceRuntime();
  DeviceRuntime(const DeviceRuntime&) = delete;
  DeviceRuntime& operator=(const DeviceRuntime&) = delete;

  // Lanes 0 and 1: queues of device work that run beside each other. On a backend that queues
  // work (CUDA) lane 1 is a second backend of the same device with a queue of its own (a stream,
  // its own cuBLAS handle and staging memory), made on first use, so that work queued on one lane
  // may run while the host fills the other; both allocate from the one allocator under the one
  // limit. Lane 0 is the backend the weights load through. Lane 1's queue goes first
  // (QueuePriority::kFirst): when both lanes have work waiting, the device starts lane 1's, so
  // that short steps there are not held behind lane 0's long kernels. A host backend's calls
  // finish before they return, so nothing stays queued to run beside: there both lanes are
  // lane 0.
  static constexpr size_t kLanes = 2;
  // How many distinct queues the lanes are: 2 on CUDA, 1 on host backends.
  size_t lanes() const { return backend_->device().is_cpu() ? 1 : kLanes; }

  // Lane `lane`'s backend (lane < kLanes).
  Backend& backend(size_t lane = 0);
  Device device() const { return backend_->device(); }
  // For loading model weights: its allocations count as weights in the breakdown.
  Context& weights_context() { return weights_context_; }
  // For running models on lane `lane`: activations and workspaces.
  Context& context(size_t lane = 0);
  // For buffers kept from one request to the next (recorded graphs' arenas), on lane `lane`:
  // they count apart, at the size of the blocks they take, so that an idle runtime holds exactly
  // weights_bytes() + persistent_bytes().
  Context& persistent_context(size_t lane = 0);
  // The allocator behind the contexts.
  CachingAllocator& allocator() { return *allocator_; }
  // The limit and max_split_size in bytes (UINT64_MAX: none).
  uint64_t limit_bytes() const { return limit_; }
  uint64_t max_split_size() const { return max_split_size_; }

  // Bytes of the blocks allocated through weights_context() and still alive.
  uint64_t weights_bytes() const;
  // Bytes of the blocks allocated through persistent_context() and still alive.
  uint64_t persistent_bytes() const;
  // Weights, workspaces (allocated minus weights), cache (reserved minus allocated), and the
  // device's free and total memory (cudaMemGetInfo; on the host MemAvailable and MemTotal).
  MemoryBreakdown breakdown() const;
  // Bytes of the device's memory held outside this runtime's allocator (the CUDA context,
  // libraries' workspaces, other processes) beyond what was so held when it was made or at the
  // last mark_outside(): mostly memory another process took since. 0 where the device's total is
  // unknown or its source commits memory only when touched (the host's heap: what the allocator
  // reserved is not all taken from the free memory yet).
  uint64_t outside_growth() const;
  // Takes what is held outside the allocator now as the baseline of outside_growth(): a server
  // calls it once it has warmed up, when its own libraries hold their workspaces.
  void mark_outside();
  // NVML's reading of a CUDA device; nothing for host backends.
  std::optional<DeviceReading> device_reading() const;
  // PyTorch's memory_summary() table, the breakdown and the NVML reading, as text and as JSON.
  std::string memory_summary() const;
  nlohmann::json memory_summary_json() const;

  // Gives every wholly free cached segment back to the device (torch.cuda.empty_cache());
  // returns the bytes.
  uint64_t release_cached() { return allocator_->release_cached(); }
  // Gives back the wholly free segments unused for at least `idle`; returns the bytes. A server
  // calls this periodically so memory a burst reserved goes back once the burst is over.
  uint64_t release_cached_idle(std::chrono::steady_clock::duration idle) {
    return allocator_->release_cached_idle(idle);
  }

 private:
  class CountingAllocator;

  std::unique_ptr<Backend> backend_;
  std::shared_ptr<MemorySource> source_;
  uint64_t device_total_ = 0;                  // the device's memory in bytes; 0 when unknown
  std::atomic<uint64_t> outside_baseline_{0};  // outside_growth()'s baseline
  uint64_t limit_ = CachingAllocatorOptions::kNone;
  uint64_t max_split_size_ = CachingAllocatorOptions::kNone;
  std::unique_ptr<CachingAllocator> allocator_;
  std::unique_ptr<CountingAllocator> weights_allocator_;
  std::unique_ptr<CountingAllocator> persistent_allocator_;
  std::unique_ptr<NvmlReader> nvml_;
  std::string pci_bus_id_;  // of a CUDA device, to find it in NVML
  std::string backend_name_;
  Context weights_context_;
  Context persistent_context_;
  Context context_;
  // Lane 1, made by the first call that asks for it.
  struct SecondLane {
    std::unique_ptr<Backend> backend;
    Context context;
    Context persistent_context;
  };
  std::once_flag second_lane_made_;
  std::unique_ptr<SecondLane> second_lane_;
  // Lane 1 on a backend that queues work, made when first asked for; null on host backends.
  // Throws for a lane past kLanes.
  SecondLane* second_lane(size_t lane);
};

}  // namespace voxd
