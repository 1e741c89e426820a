// The engine behind the HTTP layer: a server::SpeechService that synthesizes with the voices it
// loaded, of any family, all model work on one device thread (scheduler/scheduler.h) that batches
// each family's steps across requests and admits each step only when its planned workspace fits
// the memory budget (docs/scheduler.md).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/runtime.h"
#include "core/dtype.h"
#include "scheduler/scheduler_options.h"
#include "server/speech_service.h"

namespace voxd::scheduler {

class FamilyRegistry;
class Scheduler;
class VoicePool;
struct SchedulerLoad;
struct StepCounts;

struct EngineConfig {
  // The families voices may be of (families/registry.h); must outlive the service.
  const FamilyRegistry* families = nullptr;
  std::vector<std::string> voice_dirs;  // voice directories; a voice's id is its config "name"
  RuntimeOptions runtime;  // backend ("cpu", "cuda", "cuda:N"), threads, memory limit, max split
  std::optional<DType> dtype;  // weights/activations; default F16 on cuda, F32 elsewhere
  int64_t max_batch = 16;      // most units (sentences, chunks, tokens) per step
  size_t max_queue = 256;      // requests admitted and not finished; beyond that admit() → 503
  int64_t chunk_frames = 64;   // vocoder chunk, in mel frames
  // A stream's first vocoder chunk, in mel frames (more than chunk_frames means chunk_frames):
  // its first audio comes from less work.
  int64_t first_chunk_frames = 32;
  // SchedulerOptions::first_clause_alone.
  bool first_clause_alone = false;
  // Admitted → finished; past it the job fails (504 ApiError).
  std::chrono::milliseconds request_timeout{300000};
  // Load a voice on first use; unload the least recently used idle one when memory is needed.
  bool lazy_voices = false;
  bool cuda_graphs = true;
  // SchedulerOptions::overlap_steps.
  bool overlap_steps = false;
  // SchedulerOptions::acoustic_length_band.
  double acoustic_length_band = SchedulerOptions{}.acoustic_length_band;
  // SchedulerOptions::acoustic_graph_bytes.
  uint64_t acoustic_graph_bytes = SchedulerOptions{}.acoustic_graph_bytes;
  // SchedulerOptions::warm_up_while_idle.
  std::optional<bool> warm_up_while_idle;
  // Bytes of each loaded voice's KV cache pool (families whose streams hold one); 0: the
  // family's default.
  uint64_t kv_cache_bytes = 0;
  // SchedulerOptions::prefill_chunk_tokens.
  int64_t prefill_chunk_tokens = SchedulerOptions{}.prefill_chunk_tokens;
  // The memory budget for workspaces is the runtime's limit (or the device's memory) minus the
  // weights and the persistent graph arenas; on CPU a RAM budget.
};

// Jobs from admit() must be gone before the service is destroyed.
class EngineService final : public server::SpeechService {
 public:
  // Opens the runtime, loads the voices (unless lazy), starts the device thread. Throws
  // voxd::InputError with an actionable message (no voice, a bad directory, two voices of one
  // name, a bad runtime option).
  explicit EngineService(const EngineConfig& config);
  // Cancels what runs and joins the device thread.
  ~EngineService() override;
  EngineService(const EngineService&) = delete;
  EngineService& operator=(const EngineService&) = delete;

  std::vector<std::string> models() const override;
  std::vector<server::VoiceInfo> voices() const override;
  server::Readiness readiness() const override;
  std::string memory_summary_text() const override;
  nlohmann::json memory_summary_json() const override;
  void bind_metrics(server::MetricsRegistry& registry) override;
  void collect_metrics(server::MetricsRegistry& registry) override;
  std::unique_ptr<server::SpeechJob> admit(const server::SpeechRequest& request) override;

  // Refuses new requests from now on (admit() → 503 "server is shutting down"), waits up to
  // `grace` for admitted requests to finish, cancels the rest; returns how many it cancelled.
  size_t drain(std::chrono::steady_clock::duration grace);

  struct IdleMemory {
    bool idle = false;
    uint64_t unexplained_bytes = 0;
    std::string summary;
  };
  // For the leak watchdog: whether no request is admitted, and (when idle) the allocated bytes
  // beyond weights and persistent graph arenas (0 unless something leaks), with the memory
  // summary text.
  IdleMemory idle_memory() const;

  DeviceRuntime& runtime();
  // What the scheduler holds now (streams' buffered audio and mel), and its step counts by kind
  // ("acoustic", "vocoder", ...): for tests and the monitor.
  SchedulerLoad load() const;
  StepCounts step_counts(const std::string& kind) const;
  // Names of the voices whose models are on the device now.
  std::vector<std::string> loaded_voices() const;

 private:
  // The loaded voices' KV cache pools and what streams hold of them.
  struct KvCacheUse {
    int64_t pages = 0;
    int64_t used_pages = 0;
    uint64_t bytes = 0;
    int64_t streams_holding = 0;  // streams that hold pages
    int64_t most_held = 0;        // the most pages one stream holds
    uint64_t preemptions = 0;     // since start
  };
  KvCacheUse kv_cache_use(const SchedulerLoad& load) const;

  EngineConfig config_;
  SchedulerOptions options_;  // what config_ gives the scheduler and the families
  std::unique_ptr<DeviceRuntime> runtime_;
  std::unique_ptr<VoicePool> voices_;
  // Workspace bytes the smallest step of a loaded voice needs, for readiness.
  uint64_t smallest_step_bytes_ = 0;
  std::unique_ptr<Scheduler> scheduler_;
};

}  // namespace voxd::scheduler
