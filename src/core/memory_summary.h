// Reports allocator memory in the layout of PyTorch's torch.cuda.memory_summary(), as text and as
// JSON, followed by voxd's breakdown of device memory into weights, workspaces, cache and free,
// and by what the driver reports for the whole device (NVML).
// docs/memory.md shows an example and says which of PyTorch's rows voxd does not track.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/allocator.h"
#include "core/device.h"

namespace voxd {

// Where a device's memory goes, filled by the caller (the allocator knows only its own part).
struct MemoryBreakdown {
  uint64_t weights = 0;    // model weights
  uint64_t workspace = 0;  // activations and scratch of running requests
  uint64_t cached = 0;     // reserved by the allocator but not allocated
  uint64_t free = 0;       // free on the device
  uint64_t total = 0;      // the device's capacity; 0 when unknown

  bool operator==(const MemoryBreakdown&) const = default;
};

// What the driver reports for a whole device, beside the allocator's own view (NVML on NVIDIA
// GPUs, src/backends/nvml). When `available` is false there is no reading and `reason` says why.
struct DeviceReading {
  std::string source;  // where the reading comes from: "NVML"
  bool available = false;
  std::string reason;
  std::string name;            // "NVIDIA H200"
  std::string driver_version;  // "570.124.06"
  uint64_t used_bytes = 0;
  uint64_t total_bytes = 0;
  // Percent of the last sample period in which a kernel ran / device memory was read or
  // written; empty where the device does not report it (MIG instances).
  std::optional<uint32_t> gpu_utilization;
  std::optional<uint32_t> memory_utilization;

  bool operator==(const DeviceReading&) const = default;
};

// `bytes` in binary units with two decimals: "512 B", "1.50 KiB", "3.00 MiB".
std::string format_bytes(uint64_t bytes);

// The memory_summary() table for an allocator on `device`, then the breakdown and the device
// reading when given.
std::string memory_summary(const AllocatorStats& stats, Device device,
                           const std::optional<MemoryBreakdown>& breakdown = std::nullopt,
                           const std::optional<DeviceReading>& reading = std::nullopt);

// {"device": "cuda:0", "stats": {<AllocatorStats field>: n, ...}, "breakdown": {...},
// "device_reading": {...}}; the last two only when given.
nlohmann::json memory_summary_json(const AllocatorStats& stats, Device device,
                                   const std::optional<MemoryBreakdown>& breakdown = std::nullopt,
                                   const std::optional<DeviceReading>& reading = std::nullopt);

// JSON objects keyed by field name; from_json throws voxd::Error naming a missing field.
void to_json(nlohmann::json& j, const AllocatorStats& stats);
void from_json(const nlohmann::json& j, AllocatorStats& stats);
void to_json(nlohmann::json& j, const MemoryBreakdown& breakdown);
void from_json(const nlohmann::json& j, MemoryBreakdown& breakdown);
// {"source", "available", "reason"} when unavailable, else {"source", "available", "name",
// "driver_version", "used_bytes", "total_bytes", "gpu_utilization", "memory_utilization"} (the
// last two null when not reported).
void to_json(nlohmann::json& j, const DeviceReading& reading);

}  // namespace voxd
