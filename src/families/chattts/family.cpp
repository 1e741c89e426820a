#include "families/chattts/family.h"

#include <algorithm>

#include "core/error.h"
#include "core/kv_pages.h"
#include "core/memory_summary.h"
#include "core/workspace_arena.h"
#include "core/workspace_plan.h"
#include "families/chattts/gpt_kinds.h"
#include "families/chattts/served.h"
#include "families/chattts/speaker.h"
#include "families/chattts/synthesizer.h"
#include "families/chattts/vocode_kind.h"

namespace voxd::chattts {
namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Bytes of one page of `gpt`'s paged KV cache: keys and values of every layer for kKvPageSize
// positions.
uint64_t page_bytes(const GptConfig& gpt, DType dtype) {
  return PagedKvCache::page_bytes_of(gpt.num_hidden_layers, kKvPageSize, gpt.hidden_size, dtype);
}

}  // namespace

Definition::Definition(VoiceConfig config)
    : config_(std::move(config)),
      card_{.name = config_.name,
            .directory = config_.directory,
            .family = kChatTtsType,
            .language = config_.language,
            .sample_rate = config_.sample_rate,
            .speakers = Speakers(config_).names(),
            .emotions = {},
            .sampling = true},
      front_end_(Tokenizer::from_file(config_.tokenizer_path), config_.language),
      speakers_(config_) {}

scheduler::PreparedStream Definition::prepare(std::string_view text,
                                              const scheduler::SpeechOptions& options,
                                              const scheduler::SchedulerOptions& scheduling) const {
  if (options.speed != 1.0f) {
    throw scheduler::OptionError(
        "speed is not taken by ChatTTS voices (its speaking rate is the [speed_N] token of the "
        "voice's prompt); voice '" +
            config_.name + "' speaks at its own rate",
        "speed");
  }
  scheduler::require_plain_text(options, config_.name);
  GenerationOptions generation;
  generation.seed = options.seed.value_or(0);
  generation.speaker = options.speaker;
  generation.temperature = options.temperature;
  generation.top_p = options.top_p;
  generation.top_k = options.top_k;
  generation.refine_text = options.refine_text.value_or(true);
  scheduler::PreparedStream prepared;
  prepared.work = std::make_unique<GenerationWork>(
      RequestGeneration(config_, front_end_, speakers_, text, generation), config_);
  prepared.max_buffered_samples =
      scheduling.buffered_chunks * scheduling.chunk_frames * config_.vocos.hop_length;
  return prepared;
}

std::unique_ptr<scheduler::LoadedVoice> Definition::load(
    Context& ctx, DType dtype, const scheduler::SchedulerOptions& scheduling) const {
  auto loaded = std::make_unique<LoadedModels>();
  loaded->voice = Voice::load(ctx, config_.directory, dtype);
  const Gpt& gpt = loaded->voice->gpt();
  const uint64_t page = page_bytes(config_.gpt, gpt.compute_dtype());
  const int64_t pages =
      scheduling.kv_cache_bytes > 0
          ? static_cast<int64_t>(scheduling.kv_cache_bytes / page)
          : scheduling.max_batch * ceil_div(config_.gpt.max_position_embeddings, kKvPageSize);
  if (pages < 1) {
    throw InputError("--kv-cache " + format_bytes(scheduling.kv_cache_bytes) +
                     " is less than one page of voice '" + config_.name + "''s KV cache (" +
                     format_bytes(page) + ")");
  }
  loaded->cache = gpt.make_paged_cache(ctx, pages, kKvPageSize);
  loaded->pages = std::make_unique<KvPagePool>(pages, kKvPageSize);
  return loaded;
}

WorkspacePlan Definition::plan_memory(Backend& backend, DType dtype,
                                      const scheduler::PlanShape& shape,
                                      std::vector<std::string>& notes) const {
  if (!shape.batch || !shape.units) {
    throw InputError(
        "a ChatTTS plan needs --batch (prompts decoded together) and --phonemes "
        "(tokens of the longest prompt)");
  }
  if (shape.chunks) throw InputError("--chunks does not apply to a ChatTTS voice");
  if (shape.frames) {
    throw InputError(
        "--frames does not apply to a ChatTTS voice: its audio is made in chunks of a fixed size "
        "(the plan shows them)");
  }
  const int64_t batch = *shape.batch;
  const int64_t tokens = *shape.units;
  const GptConfig& gpt_config = config_.gpt;
  if (tokens >= gpt_config.max_position_embeddings) {
    throw InputError("--phonemes " + std::to_string(tokens) + " tokens do not fit the GPT's " +
                     std::to_string(gpt_config.max_position_embeddings) + " positions");
  }
  // As the synthesizer sizes it: the prompt and the code stage's new tokens, within the GPT.
  const int64_t capacity =
      std::min(tokens + config_.infer_code.max_new_token, gpt_config.max_position_embeddings);
  WorkspaceArena weights(backend.device());
  Context load = Context::for_planning(backend, weights);
  const std::unique_ptr<Voice> voice = Voice::load(load, config_.directory, dtype);
  const Gpt& gpt = voice->gpt();

  WorkspacePlan plan;
  plan.device = backend.device().to_string();
  plan.dtype = std::string(dtype_name(gpt.compute_dtype()));
  plan.weights_bytes = weights.in_use();
  // The KV cache lives with the streams, in pages from one pool: enough for `batch` streams of
  // `capacity` positions, planned once and carried by both GPT steps.
  KvPagePool pool(batch * ceil_div(capacity, kKvPageSize), kKvPageSize);
  WorkspaceArena cache_arena(backend.device());
  Context cache_ctx = Context::for_planning(backend, cache_arena);
  PagedKvCache cache = gpt.make_paged_cache(cache_ctx, pool.pages(), pool.page_size());
  const uint64_t cache_bytes = cache_arena.in_use();
  std::vector<std::vector<int64_t>> held(static_cast<size_t>(batch));
  std::vector<const std::vector<int64_t>*> lists;
  for (std::vector<int64_t>& pages : held) {
    if (!pool.grow(pages, capacity)) throw Error("chattts plan: the pool was sized too small");
    lists.push_back(&pages);
  }
  const Tensor table = page_table(lists, pool.pages_for(capacity));
  const std::string batch_shape = "batch " + std::to_string(batch) + " x ";
  const int64_t window = RequestGeneration::history_window(config_);
  const ArenaLayout prefill = plan_workspace(backend, [&](Context& ctx) {
    const Tensor embeds = ops::empty(ctx, {batch, tokens, gpt_config.hidden_size}, DType::F32);
    const Tensor hidden =
        gpt.forward(ctx, embeds, cache, table, std::vector<int64_t>(static_cast<size_t>(batch), 0));
    // The heads read the last position only (both: a refine or a code stage's prompt).
    const Tensor last = ops::contiguous(ctx, hidden.narrow(1, tokens - 1, 1));
    draw_tokens(ctx, gpt.text_logits(ctx, last), false, gpt_config, window, 0, batch, nullptr);
    draw_tokens(ctx, gpt.code_logits(ctx, last), true, gpt_config, window, 0, batch, nullptr);
  });
  plan.stages.push_back({"gpt prefill", batch_shape + std::to_string(tokens) + " tokens",
                         prefill.bytes(), cache_bytes});
  const ArenaLayout decode = plan_workspace(backend, [&](Context& ctx) {
    const Tensor embeds = ops::empty(ctx, {batch, 1, gpt_config.hidden_size}, DType::F32);
    const Tensor hidden = gpt.forward(
        ctx, embeds, cache, table, std::vector<int64_t>(static_cast<size_t>(batch), capacity - 1));
    draw_tokens(ctx, gpt.text_logits(ctx, hidden), false, gpt_config, window, 0, batch, nullptr);
    draw_tokens(ctx, gpt.code_logits(ctx, hidden), true, gpt_config, window, 0, batch, nullptr);
  });
  plan.stages.push_back({"gpt decode step",
                         batch_shape + "1 token over " + std::to_string(capacity) + " cached",
                         decode.bytes(), cache_bytes});
  // The server vocodes chunks of the code stage's hidden states, every chunk with its context at
  // most this many rows, a batch of them from as many streams.
  const CodeChunker chunks(config_.decoder, config_.vocos, kStreamChunkFrames,
                           kFirstStreamChunkFrames);
  const int64_t rows = chunks.max_retained_frames();
  const ArenaLayout vocode = plan_workspace(backend, [&](Context& ctx) {
    plan_vocode_chunks(ctx, voice->decoder(), voice->vocos(), batch, rows);
  });
  plan.stages.push_back({"decoder + vocos",
                         batch_shape + std::to_string(rows) + " code frames a chunk",
                         vocode.bytes(), 0});
  notes.push_back("decoder + vocos: a chunk is " + std::to_string(kStreamChunkFrames) +
                  " code frames of audio with " + std::to_string(chunks.context().left_frames) +
                  " and " + std::to_string(chunks.context().right_frames) +
                  " of context (exactly the audio of the sentence in one piece)");
  notes.push_back("carried: the KV cache in pages of " + std::to_string(kKvPageSize) +
                  " positions, " + std::to_string(pool.pages_for(capacity)) + " a stream for " +
                  std::to_string(capacity) +
                  " positions (its prompt and the code stage's max_new_token) x " +
                  std::to_string(batch) + " streams = " + std::to_string(pool.pages()) +
                  " pages of " + format_bytes(cache_bytes / static_cast<uint64_t>(pool.pages())) +
                  ", " + format_bytes(cache_bytes));
  return plan;
}

uint64_t Definition::smallest_step_bytes(Backend& backend, const scheduler::LoadedVoice& loaded,
                                         const scheduler::SchedulerOptions&) const {
  // A prompt of kLeastPrefillPiece tokens (less than any stage's prompt: the templates alone are
  // longer; a prefill is cut to pieces no smaller to fit), over a page planned on the side (the
  // voice's own pool is not touched).
  const LoadedModels& models = static_cast<const LoadedModels&>(loaded);
  const Gpt& gpt = models.voice->gpt();
  WorkspaceArena cache_arena(backend.device());
  Context cache_ctx = Context::for_planning(backend, cache_arena);
  PagedKvCache cache = gpt.make_paged_cache(cache_ctx, 1, kKvPageSize);
  const GptStepShape shape{.batch = 1,
                           .tokens = kLeastPrefillPiece,
                           .table_width = 1,
                           .prefill = true,
                           .text_head = true,
                           .code_head = false};
  const ArenaLayout layout = plan_workspace(backend, [&](Context& ctx) {
    gpt_step(ctx, gpt, cache, shape, RequestGeneration::history_window(models.voice->config()),
             nullptr);
  });
  return layout.bytes();
}

std::unique_ptr<scheduler::VoiceDefinition> Family::read(const std::string& directory) const {
  return std::make_unique<Definition>(VoiceConfig::load(directory));
}

std::vector<std::unique_ptr<scheduler::StepKind>> Family::make_kinds(
    DeviceRuntime& runtime, const scheduler::SchedulerOptions& options) const {
  std::vector<std::unique_ptr<scheduler::StepKind>> kinds;
  kinds.push_back(std::make_unique<VocodeKind>(runtime));
  for (const bool prefill : {false, true}) {
    kinds.push_back(std::make_unique<GptKind>(runtime, prefill, options.cuda_graphs,
                                              options.prefill_chunk_tokens));
  }
  return kinds;
}

}  // namespace voxd::chattts
