#include "families/sambert/family.h"

#include <algorithm>

#include "core/error.h"
#include "core/memory_summary.h"
#include "core/workspace_arena.h"
#include "families/sambert/acoustic_kinds.h"
#include "families/sambert/served.h"
#include "families/sambert/steps.h"
#include "families/sambert/vocoder_kind.h"

namespace voxd::sambert {
namespace {

// The KV pool's default: pages for max_batch utterances of this many frames (25 s at 16 kHz and
// hop 200), and at least one utterance as long as the limits allow.
constexpr int64_t kTypicalUtteranceFrames = 2000;
// voxd mem's mel frames per token when the shape gives none: 100 ms at hop 200 and 16 kHz, a
// little slower than speech, so the default errs on the large side.
constexpr int64_t kDefaultFramesPerToken = 8;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Pages of the KV pool one utterance of `frames` frames holds while it is decoded.
int64_t pages_for_frames(const SambertConfig& config, int64_t frames) {
  return utterance_pages(ceil_div(frames, config.outputs_per_step));
}

// The vocoder input of a step of chunks of `frames` inside an utterance.
int64_t interior_vocoder_frames(const Voice& voice, int64_t frames) {
  const KanTtsHifiGanConfig& c = voice.vocoder().config();
  return vocoder_frames_of(voice, frames, c.left_context_frames() + frames + c.lookahead_frames());
}

// The first option `options` sets that a Sambert voice does not take, or nullptr: a seed only
// means something to an NSF vocoder's source.
const char* unsupported_option(const scheduler::SpeechOptions& options, bool nsf) {
  if (options.speed != 1.0f) return "speed";
  if (options.seed && !nsf) return "seed";
  if (options.temperature) return "temperature";
  if (options.top_p) return "top_p";
  if (options.top_k) return "top_k";
  if (options.refine_text) return "refine_text";
  return nullptr;
}

}  // namespace

Definition::Definition(VoiceConfig config)
    : config_(std::move(config)),
      card_{.name = config_.name,
            .directory = config_.directory,
            .family = kSambertType,
            .language = config_.language,
            .sample_rate = config_.sample_rate,
            .speakers = config_.symbols.speakers(),
            .emotions = config_.symbols.emotions()},
      front_end_(config_.symbols, config_.name, config_.language) {}

scheduler::PreparedStream Definition::prepare(std::string_view text,
                                              const scheduler::SpeechOptions& options,
                                              const scheduler::SchedulerOptions& scheduling) const {
  if (const char* field = unsupported_option(options, config_.acoustic.nsf)) {
    throw scheduler::OptionError(std::string(field) + " is not taken by Sambert voices; voice '" +
                                     config_.name + "' speaks as its model predicts",
                                 field);
  }
  const auto checked = [](const std::optional<std::string>& name, const char* field,
                          const auto& lookup) {
    if (!name) return;
    try {
      (void)lookup(*name);
    } catch (const InputError& e) {
      throw scheduler::OptionError(e.what(), field);
    }
  };
  checked(options.emotion, "emotion",
          [this](const std::string& name) { return config_.symbols.emotion_id(name); });
  checked(options.speaker, "speaker",
          [this](const std::string& name) { return config_.symbols.speaker_id(name); });
  std::vector<SambertTokens> utterances =
      options.input_format == scheduler::InputFormat::kKanTtsSymbols
          ? front_end_.utterances(text, options.emotion, options.speaker)
          : front_end_.text_utterances(text, options.emotion, options.speaker);
  const SambertLimits limits;
  auto work = std::make_unique<SentenceWork>(
      2 * scheduling.chunk_frames + config_.vocoder.lookahead_frames() +
          config_.acoustic.postnet_lookahead() + config_.acoustic.outputs_per_step,
      options.seed.value_or(0));
  for (size_t i = 0; i < utterances.size(); ++i) {
    const auto tokens = static_cast<int64_t>(utterances[i].linguistic.size());
    if (tokens > limits.max_tokens) {
      throw InputTooLongError("utterance " + std::to_string(i + 1) + " has " +
                              std::to_string(tokens) + " tokens, more than the " +
                              std::to_string(limits.max_tokens) + " one may have; split it");
    }
    work->utterances.emplace_back().tokens = std::move(utterances[i]);
  }
  scheduler::PreparedStream prepared;
  prepared.work = std::move(work);
  prepared.max_buffered_samples =
      scheduling.buffered_chunks * scheduling.chunk_frames * config_.hop_length;
  return prepared;
}

std::unique_ptr<scheduler::LoadedVoice> Definition::load(
    Context& ctx, DType dtype, const scheduler::SchedulerOptions& scheduling) const {
  // The Mandarin front end loads with the models, not on the first request that has text.
  (void)front_end_.load_reader();
  auto loaded = std::make_unique<LoadedModels>();
  loaded->voice = Voice::load(ctx, config_, dtype);
  const Sambert& model = loaded->voice->acoustic();
  const SambertConfig& c = config_.acoustic;
  const uint64_t page =
      PagedKvCache::page_bytes_of(c.decoder_layers, kKvPageSize, c.decoder_units, model.dtype());
  const int64_t longest = pages_for_frames(c, SambertLimits{}.max_frames);
  const int64_t pages =
      scheduling.kv_cache_bytes > 0
          ? static_cast<int64_t>(scheduling.kv_cache_bytes / page)
          : std::max(scheduling.max_batch * pages_for_frames(c, kTypicalUtteranceFrames), longest);
  if (pages < 2) {
    throw InputError("--kv-cache " + format_bytes(scheduling.kv_cache_bytes) +
                     " is less than the two pages one utterance of voice '" + config_.name +
                     "' takes at least (" + format_bytes(2 * page) + ")");
  }
  loaded->cache = model.make_cache(ctx, pages, kKvPageSize);
  loaded->pages = std::make_unique<KvPagePool>(pages, kKvPageSize);
  return loaded;
}

WorkspacePlan Definition::plan_memory(Backend& backend, DType dtype,
                                      const scheduler::PlanShape& shape,
                                      std::vector<std::string>& notes) const {
  if (!shape.batch || !shape.units) {
    throw InputError(
        "a Sambert plan needs --batch (utterances in a step) and --phonemes (tokens of the "
        "longest utterance)");
  }
  const int64_t batch = *shape.batch;
  const int64_t tokens = *shape.units;
  const int64_t frames = shape.frames.value_or(tokens * kDefaultFramesPerToken);
  if (!shape.frames) {
    notes.push_back(std::to_string(frames) + " mel frames per utterance is the default, " +
                    std::to_string(kDefaultFramesPerToken) + " per token (set --frames)");
  }
  const int64_t chunks = shape.chunks.value_or(batch);
  const int64_t chunk_frames = scheduler::SchedulerOptions{}.chunk_frames;
  WorkspaceArena weights(backend.device());
  Context load = Context::for_planning(backend, weights);
  const std::unique_ptr<Voice> voice = Voice::load(load, config_, dtype);
  const Sambert& model = voice->acoustic();

  WorkspacePlan plan;
  plan.device = backend.device().to_string();
  plan.dtype = std::string(dtype_name(model.dtype()));
  plan.weights_bytes = weights.in_use();
  // The decoder's keys and values live with the utterances, in pages of one pool: enough for
  // `batch` utterances of `frames` frames, carried by every step.
  const int64_t steps = ceil_div(frames, config_.acoustic.outputs_per_step);
  const int64_t pages = batch * pages_for_frames(config_.acoustic, frames);
  WorkspaceArena cache_arena(backend.device());
  Context cache_ctx = Context::for_planning(backend, cache_arena);
  PagedKvCache cache = model.make_cache(cache_ctx, pages, kKvPageSize);
  const uint64_t cache_bytes = cache_arena.in_use();
  const std::string batch_shape = "batch " + std::to_string(batch) + " x ";
  plan.stages.push_back({"encoder", batch_shape + std::to_string(tokens) + " tokens",
                         plan_encode(backend, model, batch, tokens).bytes(), cache_bytes});
  plan.stages.push_back({"decoder prefill", batch_shape + std::to_string(steps) + " steps",
                         plan_prefill(backend, model, cache, batch, steps).bytes(), cache_bytes});
  const int64_t width = ceil_div(steps, kKvPageSize);
  plan.stages.push_back(
      {"decoder step", batch_shape + "1 step over " + std::to_string(steps) + " steps",
       plan_decode(backend, model, cache, batch, width, width).bytes(), cache_bytes});
  plan.stages.push_back(
      {"postnet + vocoder",
       std::to_string(chunks) + " chunks x " + std::to_string(chunk_frames) + " frames",
       plan_vocode(backend, *voice, chunks, chunk_frames,
                   interior_vocoder_frames(*voice, chunk_frames))
           .bytes(),
       cache_bytes});
  notes.push_back("postnet + vocoder: a chunk is " + std::to_string(chunk_frames) +
                  " frames (the server's default --chunk-frames) with " +
                  std::to_string(model.config().postnet_context()) +
                  " decoder frames of context and " +
                  std::to_string(model.config().postnet_lookahead()) + " ahead for the postnet, " +
                  std::to_string(voice->vocoder().config().left_context_frames()) +
                  " postnet frames of context for the vocoder (exactly the utterance's audio in "
                  "one piece)");
  notes.push_back("carried: the decoder's keys and values in pages of " +
                  std::to_string(kKvPageSize) + " steps, " +
                  std::to_string(pages_for_frames(config_.acoustic, frames)) + " an utterance of " +
                  std::to_string(steps) + " steps (its memory's and its own) x " +
                  std::to_string(batch) + " utterances = " + std::to_string(pages) + " pages, " +
                  format_bytes(cache_bytes));
  return plan;
}

uint64_t Definition::smallest_step_bytes(Backend& backend, const scheduler::LoadedVoice& loaded,
                                         const scheduler::SchedulerOptions& scheduling) const {
  const LoadedModels& models = static_cast<const LoadedModels&>(loaded);
  return plan_vocode(backend, *models.voice, 1, scheduling.chunk_frames,
                     interior_vocoder_frames(*models.voice, scheduling.chunk_frames))
      .bytes();
}

std::unique_ptr<scheduler::VoiceDefinition> Family::read(const std::string& directory) const {
  return std::make_unique<Definition>(VoiceConfig::load(directory));
}

std::vector<std::unique_ptr<scheduler::StepKind>> Family::make_kinds(
    DeviceRuntime& runtime, const scheduler::SchedulerOptions& scheduling) const {
  std::vector<std::unique_ptr<scheduler::StepKind>> kinds;
  kinds.push_back(std::make_unique<VocoderKind>(runtime, scheduling.chunk_frames));
  kinds.push_back(std::make_unique<DecodeKind>(runtime));
  kinds.push_back(std::make_unique<PrefillKind>(runtime, scheduling.chunk_frames,
                                                scheduling.first_chunk_frames));
  kinds.push_back(std::make_unique<EncodeKind>(runtime, SambertLimits{}));
  return kinds;
}

const VoiceConfig& config_of(const scheduler::VoiceEntry& entry) {
  return static_cast<const Definition&>(*entry.definition).config();
}

}  // namespace voxd::sambert
