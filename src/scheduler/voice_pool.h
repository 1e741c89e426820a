// The voices an engine offers, of any family. Each voice's definition (config and text front
// end) exists from the start (the front end runs on connection threads at admission); its models
// are on the device while loaded: all at start, or with lazy loading on first use, the least
// recently used idle voice unloaded when memory is needed. Loading and unloading belong to the
// device thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/runtime.h"
#include "scheduler/family.h"
#include "scheduler/stream.h"

namespace voxd::scheduler {

struct VoiceEntry {
  VoiceEntry(const Family& family, std::unique_ptr<const VoiceDefinition> definition)
      : family(family), definition(std::move(definition)) {}

  const Family& family;
  const std::unique_ptr<const VoiceDefinition> definition;  // safe to use from any thread
  std::atomic<bool> loaded{false};
  // LoadedVoice::kv_cache_pages and kv_cache_page_bytes while loaded, for metrics (any thread).
  std::atomic<int64_t> kv_cache_pages{0};
  std::atomic<uint64_t> kv_cache_page_bytes{0};

  // Device thread: the models while loaded (what the family's load() made).
  std::unique_ptr<LoadedVoice> models;
  Clock::time_point last_used;

  // Under the scheduler's mutex: admitted requests for this voice not yet finished.
  size_t streams = 0;

  const VoiceCard& card() const { return definition->card(); }
};

class VoicePool {
 public:
  // Reads every directory's voice with the family its config names in `families` (and, unless
  // `lazy`, loads the models in `dtype` onto the runtime's device, with what their streams hold
  // sized by `scheduling`). Throws voxd::InputError
  // naming the directory for a bad voice, no voice at all, or two voices of one name.
  VoicePool(DeviceRuntime& runtime, const FamilyRegistry& families,
            const std::vector<std::string>& directories, DType dtype, bool lazy,
            const SchedulerOptions& scheduling);
  ~VoicePool();
  VoicePool(const VoicePool&) = delete;
  VoicePool& operator=(const VoicePool&) = delete;

  // The voice named `id`, or null.
  VoiceEntry* find(const std::string& id) const;
  const std::vector<std::unique_ptr<VoiceEntry>>& entries() const { return entries_; }
  DType dtype() const { return dtype_; }
  bool lazy() const { return lazy_; }

  // Device thread: loads `entry`'s models when they are not loaded; throws voxd::Error when they
  // do not fit (the caller may unload another voice and try again).
  void load(VoiceEntry& entry);
  // Device thread: gives `entry`'s models (and what was recorded for them) back.
  void unload(VoiceEntry& entry);
  // Device bytes the voices' recorded graphs hold (any thread): they are recorded in the
  // runtime's persistent context.
  uint64_t graph_bytes() const { return runtime_.persistent_bytes(); }

 private:
  DeviceRuntime& runtime_;
  DType dtype_;
  SchedulerOptions scheduling_;
  bool lazy_;
  std::vector<std::unique_ptr<VoiceEntry>> entries_;
};

}  // namespace voxd::scheduler
