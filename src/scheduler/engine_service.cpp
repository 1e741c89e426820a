#include "scheduler/engine_service.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "core/memory_summary.h"
#include "scheduler/memory_budget.h"
#include "scheduler/scheduler.h"
#include "scheduler/voice_pool.h"

namespace voxd::scheduler {
namespace {

using server::ApiError;

// One admitted request: its stream in the scheduler, released when the job goes.
class EngineJob final : public server::SpeechJob {
 public:
  EngineJob(Scheduler& scheduler, std::shared_ptr<Stream> stream)
      : scheduler_(scheduler), stream_(std::move(stream)) {}
  ~EngineJob() override { scheduler_.release(*stream_); }
  EngineJob(const EngineJob&) = delete;
  EngineJob& operator=(const EngineJob&) = delete;

  int64_t sample_rate() const override { return stream_->sample_rate; }
  void start(std::function<void()> wake) override { scheduler_.watch(*stream_, std::move(wake)); }
  bool take(std::vector<float>& samples) override { return scheduler_.take(*stream_, samples); }

 private:
  Scheduler& scheduler_;
  std::shared_ptr<Stream> stream_;
};

// eSpeak's "en-us" as BCP 47: "en-US".
std::string bcp47(std::string language) {
  const size_t dash = language.find('-');
  if (dash == std::string::npos) return language;
  std::transform(language.begin() + static_cast<std::ptrdiff_t>(dash), language.end(),
                 language.begin() + static_cast<std::ptrdiff_t>(dash),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return language;
}

SchedulerOptions scheduler_options(const EngineConfig& config) {
  SchedulerOptions options;
  options.max_batch = config.max_batch;
  options.max_queue = config.max_queue;
  options.chunk_frames = config.chunk_frames;
  options.first_chunk_frames = std::min(config.first_chunk_frames, config.chunk_frames);
  options.first_clause_alone = config.first_clause_alone;
  options.request_timeout = config.request_timeout;
  options.cuda_graphs = config.cuda_graphs;
  options.overlap_steps = config.overlap_steps;
  options.acoustic_graph_bytes = config.acoustic_graph_bytes;
  options.acoustic_length_band = config.acoustic_length_band;
  options.warm_up_while_idle = config.warm_up_while_idle;
  options.kv_cache_bytes = config.kv_cache_bytes;
  options.prefill_chunk_tokens = config.prefill_chunk_tokens;
  return options;
}

InputFormat input_format_of(const server::SpeechRequest& request) {
  return request.input_format == server::InputFormat::kKanTtsSymbols ? InputFormat::kKanTtsSymbols
                                                                     : InputFormat::kText;
}

}  // namespace

EngineService::EngineService(const EngineConfig& config)
    : config_(config),
      options_(scheduler_options(config)),
      runtime_(std::make_unique<DeviceRuntime>(config.runtime)) {
  VOXD_CHECK(config.families != nullptr, "EngineConfig::families is not set");
  if (config.chunk_frames < 1) {
    throw InputError("chunk_frames must be at least 1 mel frame, got " +
                     std::to_string(config.chunk_frames));
  }
  const DType dtype = config.dtype.value_or(runtime_->device().is_cpu() ? DType::F32 : DType::F16);
  voices_ = std::make_unique<VoicePool>(*runtime_, *config.families, config.voice_dirs, dtype,
                                        config.lazy_voices, options_);
  for (const auto& entry : voices_->entries()) {
    if (!entry->models) continue;
    smallest_step_bytes_ = std::max(
        smallest_step_bytes_,
        entry->definition->smallest_step_bytes(runtime_->backend(), *entry->models, options_));
  }
  scheduler_ = std::make_unique<Scheduler>(*runtime_, *voices_, options_);
}

EngineService::~EngineService() {
  scheduler_.reset();
  voices_.reset();
}

std::vector<std::string> EngineService::models() const {
  return {"voxd", "tts-1", "tts-1-hd"};
}

std::vector<server::VoiceInfo> EngineService::voices() const {
  std::vector<server::VoiceInfo> out;
  for (const auto& entry : voices_->entries()) {
    const VoiceCard& card = entry->card();
    out.push_back({card.name, card.sample_rate, bcp47(card.language), card.family, card.speakers,
                   card.emotions, card.sampling});
  }
  return out;
}

server::Readiness EngineService::readiness() const {
  if (scheduler_->draining()) return {false, "the server is shutting down"};
  if (!voices_->lazy()) {
    for (const auto& entry : voices_->entries()) {
      if (!entry->loaded.load()) return {false, "voice '" + entry->card().name + "' is not loaded"};
    }
  }
  const uint64_t budget = scheduler_->budget_bytes();
  if (budget < smallest_step_bytes_) {
    return {false, "memory headroom " + format_bytes(budget) + " is below the " +
                       format_bytes(smallest_step_bytes_) + " the smallest step needs"};
  }
  return {true, ""};
}

EngineService::KvCacheUse EngineService::kv_cache_use(const SchedulerLoad& load) const {
  KvCacheUse use;
  for (const auto& entry : voices_->entries()) {
    const int64_t pages = entry->kv_cache_pages.load();
    use.pages += pages;
    use.bytes += static_cast<uint64_t>(pages) * entry->kv_cache_page_bytes.load();
  }
  for (const auto& stream : load.streams) {
    use.used_pages += stream.work.kv_pages;
    if (stream.work.kv_pages > 0) ++use.streams_holding;
    use.most_held = std::max(use.most_held, stream.work.kv_pages);
  }
  use.preemptions = scheduler_->preemptions();
  return use;
}

std::string EngineService::memory_summary_text() const {
  std::string text = runtime_->memory_summary();
  const KvCacheUse kv = kv_cache_use(scheduler_->load());
  if (kv.pages == 0) return text;
  text +=
      "\nKV cache (the pools of voices that generate token by token; allocated at load, part "
      "of the weights above)\n";
  text += "  pages        " + std::to_string(kv.used_pages) + " used of " +
          std::to_string(kv.pages) + " (" + std::to_string(kv.pages - kv.used_pages) + " free), " +
          format_bytes(kv.bytes) + "\n";
  text += "  streams      " + std::to_string(kv.streams_holding) +
          " hold pages, the most one holds " + std::to_string(kv.most_held) + "\n";
  text += "  preemptions  " + std::to_string(kv.preemptions) +
          " (streams that gave their pages back to be recomputed)\n";
  return text;
}

nlohmann::json EngineService::memory_summary_json() const {
  nlohmann::json summary = runtime_->memory_summary_json();
  const KvCacheUse kv = kv_cache_use(scheduler_->load());
  summary["kv_cache"] = {{"pages", kv.pages},
                         {"used_pages", kv.used_pages},
                         {"free_pages", kv.pages - kv.used_pages},
                         {"bytes", kv.bytes},
                         {"streams_holding_pages", kv.streams_holding},
                         {"most_pages_held", kv.most_held},
                         {"preemptions", kv.preemptions}};
  return summary;
}

void EngineService::bind_metrics(server::MetricsRegistry& registry) {
  scheduler_->bind_metrics(registry);
}

void EngineService::collect_metrics(server::MetricsRegistry& registry) {
  const SchedulerLoad now = scheduler_->load();
  registry.gauge("voxd_engine_queue_depth", "Speech requests admitted and not finished.")
      .set(static_cast<double>(now.admitted));
  registry.gauge("voxd_engine_active_streams", "Streams the scheduler is making audio for.")
      .set(static_cast<double>(now.streams.size()));
  double buffered = 0.0;
  for (const auto& stream : now.streams) buffered += static_cast<double>(stream.buffered_samples);
  registry
      .gauge("voxd_engine_buffered_samples",
             "Audio samples made and waiting for their clients, all streams together.")
      .set(buffered);
  const MemoryBreakdown memory = runtime_->breakdown();
  const std::pair<const char*, uint64_t> kinds[] = {{"weights", memory.weights},
                                                    {"workspace", memory.workspace},
                                                    {"cache", memory.cached},
                                                    {"free", memory.free},
                                                    {"total", memory.total}};
  for (const auto& [kind, bytes] : kinds) {
    registry
        .gauge("voxd_engine_memory_bytes",
               "Device memory by kind: weights, workspace (activations, graphs), cache (reserved, "
               "not allocated), free and total.",
               {{"kind", kind}})
        .set(static_cast<double>(bytes));
  }
  registry
      .gauge("voxd_engine_memory_outside_growth_bytes",
             "Device memory held outside this server's allocator beyond what was held once it "
             "had warmed up: another process on the device, or the server's own libraries "
             "growing; 0 where the device's total is unknown.")
      .set(static_cast<double>(runtime_->outside_growth()));
  const KvCacheUse kv = kv_cache_use(now);
  const std::pair<const char*, int64_t> pages[] = {
      {"total", kv.pages}, {"used", kv.used_pages}, {"free", kv.pages - kv.used_pages}};
  for (const auto& [state, count] : pages) {
    registry
        .gauge("voxd_engine_kv_cache_pages",
               "Pages of the loaded voices' KV cache pools: total, used by streams, free.",
               {{"state", state}})
        .set(static_cast<double>(count));
  }
  registry
      .gauge("voxd_engine_kv_cache_bytes", "Device memory of the loaded voices' KV cache pools.")
      .set(static_cast<double>(kv.bytes));
  registry.gauge("voxd_engine_kv_cache_streams", "Streams that hold pages of a KV cache pool now.")
      .set(static_cast<double>(kv.streams_holding));
  registry
      .gauge("voxd_engine_kv_cache_most_pages_per_stream",
             "The most pages of a KV cache pool one stream holds now.")
      .set(static_cast<double>(kv.most_held));
  registry.gauge("voxd_engine_graph_bytes", "Device memory the recorded vocoder graphs hold.")
      .set(static_cast<double>(voices_->graph_bytes()));
  registry
      .gauge("voxd_engine_workspace_budget_bytes",
             "Device memory a step may take now, within the limit.")
      .set(static_cast<double>(scheduler_->budget_bytes()));
  registry.gauge("voxd_engine_voices_loaded", "Voices whose models are on the device.")
      .set(static_cast<double>(loaded_voices().size()));
  if (const std::optional<DeviceReading> reading = runtime_->device_reading();
      reading && reading->available) {
    registry.gauge("voxd_gpu_memory_bytes", "NVML: the GPU's memory.", {{"kind", "used"}})
        .set(static_cast<double>(reading->used_bytes));
    registry.gauge("voxd_gpu_memory_bytes", "NVML: the GPU's memory.", {{"kind", "total"}})
        .set(static_cast<double>(reading->total_bytes));
    if (reading->gpu_utilization) {
      registry
          .gauge("voxd_gpu_utilization_percent",
                 "NVML: percent of the last sample period in which a kernel ran.")
          .set(static_cast<double>(*reading->gpu_utilization));
    }
  }
}

std::unique_ptr<server::SpeechJob> EngineService::admit(const server::SpeechRequest& request) {
  VoiceEntry* voice = voices_->find(request.voice);
  if (voice == nullptr) {
    throw ApiError::invalid_request("voice '" + request.voice + "' is not one of this server's",
                                    "voice", "voice_not_found");
  }
  if (!(request.speed >= server::kMinSpeed && request.speed <= server::kMaxSpeed)) {
    throw ApiError::invalid_request("speed must be between 0.25 and 4.0", "speed");
  }
  // Refused before the text is processed, when the queue is full already.
  if (std::optional<ApiError> refusal = scheduler_->refusal()) throw *refusal;
  PreparedStream prepared;
  try {
    prepared = voice->definition->prepare(request.input,
                                          SpeechOptions{.speed = request.speed,
                                                        .seed = request.seed,
                                                        .temperature = request.temperature,
                                                        .top_p = request.top_p,
                                                        .top_k = request.top_k,
                                                        .speaker = request.speaker,
                                                        .refine_text = request.refine_text,
                                                        .emotion = request.emotion,
                                                        .input_format = input_format_of(request)},
                                          options_);
  } catch (const OptionError& e) {
    throw ApiError::invalid_request(e.what(), e.field());
  } catch (const InputTooLongError& e) {
    ApiError error = ApiError::invalid_request(e.what(), "input", "input_too_long");
    error.status = 413;
    throw error;
  } catch (const InputError& e) {
    throw ApiError::invalid_request(e.what(), "input", "nothing_to_pronounce");
  }
  return std::make_unique<EngineJob>(*scheduler_, scheduler_->admit(*voice, std::move(prepared)));
}

size_t EngineService::drain(std::chrono::steady_clock::duration grace) {
  return scheduler_->drain(grace);
}

EngineService::IdleMemory EngineService::idle_memory() const {
  IdleMemory out;
  out.idle = scheduler_->idle();
  if (!out.idle) return out;
  const MemoryBreakdown memory = runtime_->breakdown();
  const uint64_t graphs = voices_->graph_bytes();
  out.unexplained_bytes = memory.workspace > graphs ? memory.workspace - graphs : 0;
  out.summary = runtime_->memory_summary();
  return out;
}

DeviceRuntime& EngineService::runtime() {
  return *runtime_;
}

SchedulerLoad EngineService::load() const {
  return scheduler_->load();
}

StepCounts EngineService::step_counts(const std::string& kind) const {
  return scheduler_->counts(kind);
}

std::vector<std::string> EngineService::loaded_voices() const {
  std::vector<std::string> out;
  for (const auto& entry : voices_->entries()) {
    if (entry->loaded.load()) out.push_back(entry->card().name);
  }
  return out;
}

}  // namespace voxd::scheduler
