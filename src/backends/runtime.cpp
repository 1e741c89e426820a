#include "backends/runtime.h"

#include <algorithm>
#include <mutex>
#include <string>

#include "backends/nvml/nvml_reader.h"
#include "backends/registry.h"
#include "core/error.h"
#ifdef VOXD_HAVE_CUDA
#include "backends/cuda/cuda_memory_source.h"
#endif

namespace voxd {
namespace {

// Bytes of the device held outside the allocator of `stats`: its total less its free memory and
// the allocator's reserved segments (0 where the total is unknown).
uint64_t held_outside(const SourceMemory& memory, const AllocatorStats& stats) {
  const uint64_t inside = memory.free + stats.reserved_bytes;
  return memory.total > inside ? memory.total - inside : 0;
}

// `given`, checked to be of `device`, or the device's own source.
std::shared_ptr<MemorySource> source_of(Device device, std::shared_ptr<MemorySource> given) {
  if (given) {
    if (given->device() != device) {
      throw InputError("the memory source given for " + device.to_string() + " is of " +
                       given->device().to_string());
    }
    return given;
  }
  if (device.is_cpu()) return std::make_shared<HostMemorySource>();
#ifdef VOXD_HAVE_CUDA
  return std::make_shared<CudaMemorySource>(device.index);
#else
  throw InputError("no memory source for " + device.to_string() + ": voxd was built without CUDA");
#endif
}

uint64_t resolve_limit(const std::optional<MemoryAmount>& limit, Device device, uint64_t total) {
  if (!limit.has_value()) return CachingAllocatorOptions::kNone;
  const uint64_t bytes = limit->resolve(total);
  if (total != 0 && bytes > total) {
    throw InputError(limit->option() + ": " + format_bytes(bytes) + " is more than " +
                     device.to_string() + " has (" + format_bytes(total) +
                     "); give at most that, or a fraction such as 0.9");
  }
  return bytes;
}

uint64_t resolve_max_split_size(const std::optional<MemoryAmount>& size, uint64_t total) {
  if (!size.has_value()) return CachingAllocatorOptions::kNone;
  const uint64_t bytes = size->resolve(total);
  if (bytes <= CachingAllocator::kSmallSegment) {
    throw InputError(size->option() + ": " + format_bytes(bytes) + " must be above " +
                     format_bytes(CachingAllocator::kSmallSegment) +
                     " (the small-segment size); leave it unset to split blocks of any size");
  }
  return bytes;
}

}  // namespace

// Forwards to the caching allocator and counts the blocks it hands out (at their size, which may
// exceed the request when a cached block is reused unsplit), so that weights and persistent
// buffers show apart from activations while one limit covers them all.
class DeviceRuntime::CountingAllocator final : public Allocator {
 public:
  explicit CountingAllocator(CachingAllocator& inner) : inner_(inner) {}

  void* allocate(size_t bytes) override {
    void* ptr = inner_.allocate(bytes);
    const size_t size = inner_.allocated_size(ptr);
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.count_block(size);
    return ptr;
  }
  void deallocate(void* ptr, size_t bytes) override {
    const size_t size = inner_.allocated_size(ptr);
    inner_.deallocate(ptr, bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.count_block_freed(size);
  }
  Device device() const override { return inner_.device(); }
  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

 private:
  CachingAllocator& inner_;
  mutable std::mutex mutex_;
  AllocatorStats stats_;
};

DeviceRuntime::DeviceRuntime(const RuntimeOptions& options)
    : backend_(make_backend(options.backend, options.threads)),
      source_(source_of(backend_->device(), options.source)),
      device_total_(source_->memory().total),
      limit_(resolve_limit(options.memory_limit, backend_->device(), device_total_)),
      max_split_size_(resolve_max_split_size(options.max_split_size, device_total_)),
      allocator_(std::make_unique<CachingAllocator>(
          *source_,
          CachingAllocatorOptions{
              .limit = limit_, .max_split_size = max_split_size_, .release_before_reserve = true})),
      weights_allocator_(std::make_unique<CountingAllocator>(*allocator_)),
      persistent_allocator_(std::make_unique<CountingAllocator>(*allocator_)),
      backend_name_(options.backend),
      weights_context_(*backend_, *weights_allocator_),
      persistent_context_(*backend_, *persistent_allocator_),
      context_(*backend_, *allocator_) {
  mark_outside();
#ifdef VOXD_HAVE_CUDA
  if (const auto* cuda = dynamic_cast<const CudaMemorySource*>(source_.get())) {
    nvml_ = std::make_unique<NvmlReader>();
    pci_bus_id_ = cuda->pci_bus_id();
  }
#endif
}

DeviceRuntime::~DeviceRuntime() = default;

DeviceRuntime::SecondLane* DeviceRuntime::second_lane(size_t lane) {
  VOXD_CHECK(lane < kLanes, "lane " + std::to_string(lane) + " of a runtime with " +
                                std::to_string(kLanes) + " lanes");
  if (lane == 0 || lanes() == 1) return nullptr;
  std::call_once(second_lane_made_, [&] {
    std::unique_ptr<Backend> backend = make_backend(backend_name_, 0, QueuePriority::kFirst);
    Backend& made = *backend;
    second_lane_ = std::make_unique<SecondLane>(std::move(backend), Context(made, *allocator_),
                                                Context(made, *persistent_allocator_));
  });
  return second_lane_.get();
}

Backend& DeviceRuntime::backend(size_t lane) {
  SecondLane* second = second_lane(lane);
  return second != nullptr ? *second->backend : *backend_;
}

Context& DeviceRuntime::context(size_t lane) {
  SecondLane* second = second_lane(lane);
  return second != nullptr ? second->context : context_;
}

Context& DeviceRuntime::persistent_context(size_t lane) {
  SecondLane* second = second_lane(lane);
  return second != nullptr ? second->persistent_context : persistent_context_;
}

uint64_t DeviceRuntime::weights_bytes() const {
  return weights_allocator_->stats().allocated_bytes;
}

uint64_t DeviceRuntime::persistent_bytes() const {
  return persistent_allocator_->stats().allocated_bytes;
}

uint64_t DeviceRuntime::outside_growth() const {
  if (!source_->commits_on_reserve()) return 0;
  const uint64_t now = held_outside(source_->memory(), allocator_->stats());
  const uint64_t baseline = outside_baseline_.load();
  return now > baseline ? now - baseline : 0;
}

void DeviceRuntime::mark_outside() {
  outside_baseline_.store(held_outside(source_->memory(), allocator_->stats()));
}

MemoryBreakdown DeviceRuntime::breakdown() const {
  const AllocatorStats stats = allocator_->stats();
  const uint64_t weights = std::min(weights_bytes(), stats.allocated_bytes);
  const SourceMemory memory = source_->memory();
  return MemoryBreakdown{.weights = weights,
                         .workspace = stats.allocated_bytes - weights,
                         .cached = stats.reserved_bytes - stats.allocated_bytes,
                         .free = memory.free,
                         .total = memory.total};
}

std::optional<DeviceReading> DeviceRuntime::device_reading() const {
  if (nvml_ == nullptr) return std::nullopt;
  return nvml_->read_pci_bus_id(pci_bus_id_);
}

std::string DeviceRuntime::memory_summary() const {
  return ::voxd::memory_summary(allocator_->stats(), device(), breakdown(), device_reading());
}

nlohmann::json DeviceRuntime::memory_summary_json() const {
  return ::voxd::memory_summary_json(allocator_->stats(), device(), breakdown(), device_reading());
}

}  // namespace voxd
