// The voices an engine offers. Each voice's config and text front end exist from the start (the
// front end runs on connection threads at admission); its models are on the device while loaded:
// all at start, or with lazy loading on first use, the least recently used idle voice unloaded
// when memory is needed. Loading, unloading and the vocoder graphs belong to the device thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backends/runtime.h"
#include "models/voice.h"
#include "pipeline/vocoder_graphs.h"
#include "scheduler/stream.h"
#include "text/frontend.h"

namespace voxd::scheduler {

struct VoiceEntry {
  VoiceEntry(VoiceConfig config, text::FrontEnd front_end)
      : config(std::move(config)), front_end(std::move(front_end)) {}

  const VoiceConfig config;
  const text::FrontEnd front_end;  // safe to use from any thread
  std::atomic<bool> loaded{false};

  // Device thread.
  std::unique_ptr<Voice> voice;
  // Recorded vocoder runs for the interior chunk shape, on backends that record graphs.
  std::unique_ptr<VocoderGraphs> graphs;
  std::set<int64_t> graph_batches;  // batch sizes recorded in `graphs`
  Clock::time_point last_used;

  // Under the scheduler's mutex: admitted requests for this voice not yet finished.
  size_t streams = 0;
};

class VoicePool {
 public:
  // Reads every directory's config and symbols (and, unless `lazy`, loads the models in `dtype`
  // onto the runtime's device). Throws voxd::InputError naming the directory for a bad voice, no
  // voice at all, or two voices of one name.
  VoicePool(DeviceRuntime& runtime, const std::vector<std::string>& directories, DType dtype,
            bool lazy);
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
  // Device thread: gives `entry`'s models and graphs back.
  void unload(VoiceEntry& entry);
  // Device bytes the vocoder graphs of every voice hold (any thread): they are recorded in the
  // runtime's persistent context.
  uint64_t graph_bytes() const { return runtime_.persistent_bytes(); }

 private:
  DeviceRuntime& runtime_;
  DType dtype_;
  bool lazy_;
  std::vector<std::unique_ptr<VoiceEntry>> entries_;
};

}  // namespace voxd::scheduler
