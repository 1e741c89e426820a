// Reports allocator memory in the layout of PyTorch's torch.cuda.memory_summary(), as text and as
// JSON, followed by voxd's breakdown of device memory into weights, workspaces, cache and free.
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

// `bytes` in binary units with two decimals: "512 B", "1.50 KiB", "3.00 MiB".
std::string format_bytes(uint64_t bytes);

// The memory_summary() table for an allocator on `device`, then the breakdown when given.
std::string memory_summary(const AllocatorStats& stats, Device device,
                           const std::optional<MemoryBreakdown>& breakdown = std::nullopt);

// {"device": "cuda:0", "stats": {<AllocatorStats field>: n, ...}, "breakdown": {...}}; the
// breakdown only when given.
nlohmann::json memory_summary_json(const AllocatorStats& stats, Device device,
                                   const std::optional<MemoryBreakdown>& breakdown = std::nullopt);

// JSON objects keyed by field name; from_json throws voxd::Error naming a missing field.
void to_json(nlohmann::json& j, const AllocatorStats& stats);
void from_json(const nlohmann::json& j, AllocatorStats& stats);
void to_json(nlohmann::json& j, const MemoryBreakdown& breakdown);
void from_json(const nlohmann::json& j, MemoryBreakdown& breakdown);

}  // namespace voxd
