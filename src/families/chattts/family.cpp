#include "families/chattts/family.h"

#include <algorithm>

#include "core/error.h"
#include "core/kv_pages.h"
#include "core/memory_summary.h"
#include "core/workspace_arena.h"
#include "core/workspace_plan.h"
#include "families/chattts/speaker.h"
#include "families/chattts/synthesizer.h"

namespace voxd::chattts {
namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

InputError not_served(const std::string& name) {
  return InputError("voice '" + name +
                    "' is a ChatTTS voice, which voxd serve does not serve yet; voxd synth "
                    "speaks it (voxd synth --voice " +
                    name + " --text ...)");
}

}  // namespace

Definition::Definition(VoiceConfig config)
    : config_(std::move(config)),
      card_{.name = config_.name,
            .directory = config_.directory,
            .family = kChatTtsType,
            .language = config_.language,
            .sample_rate = config_.sample_rate,
            .speakers = Speakers(config_).names()},
      front_end_(Tokenizer::from_file(config_.tokenizer_path), config_.language) {}

scheduler::PreparedStream Definition::prepare(std::string_view, const scheduler::SpeechOptions&,
                                              const scheduler::SchedulerOptions&) const {
  throw not_served(config_.name);
}

std::unique_ptr<scheduler::LoadedVoice> Definition::load(
    Context&, DType, const scheduler::SchedulerOptions&) const {
  throw not_served(config_.name);
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
  const int64_t frames = shape.frames.value_or(2 * tokens);
  if (!shape.frames) {
    notes.push_back(std::to_string(frames) +
                    " mel frames for the decoder and Vocos is the default, 2 per token (set "
                    "--frames)");
  }
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
  const ArenaLayout prefill = plan_workspace(backend, [&](Context& ctx) {
    const Tensor embeds = ops::empty(ctx, {batch, tokens, gpt_config.hidden_size}, DType::F32);
    const Tensor hidden =
        gpt.forward(ctx, embeds, cache, table, std::vector<int64_t>(static_cast<size_t>(batch), 0));
    // The heads read the last position only (both: a refine or a code stage's prompt).
    const Tensor last = ops::contiguous(ctx, hidden.narrow(1, tokens - 1, 1));
    (void)gpt.text_logits(ctx, last);
    (void)gpt.code_logits(ctx, last);
  });
  plan.stages.push_back({"gpt prefill", batch_shape + std::to_string(tokens) + " tokens",
                         prefill.bytes(), cache_bytes});
  const ArenaLayout decode = plan_workspace(backend, [&](Context& ctx) {
    const Tensor embeds = ops::empty(ctx, {batch, 1, gpt_config.hidden_size}, DType::F32);
    const Tensor hidden = gpt.forward(
        ctx, embeds, cache, table, std::vector<int64_t>(static_cast<size_t>(batch), capacity - 1));
    (void)gpt.text_logits(ctx, hidden);
    (void)gpt.code_logits(ctx, hidden);
  });
  plan.stages.push_back({"gpt decode step",
                         batch_shape + "1 token over " + std::to_string(capacity) + " cached",
                         decode.bytes(), cache_bytes});
  const ArenaLayout vocode = plan_workspace(backend, [&](Context& ctx) {
    const Tensor hidden =
        ops::empty(ctx, {batch, (frames + 1) / 2, gpt_config.hidden_size}, DType::F32);
    (void)voice->vocos().forward(ctx, voice->decoder().decode_hidden(ctx, hidden));
  });
  plan.stages.push_back(
      {"decoder + vocos", batch_shape + std::to_string(frames) + " mel frames", vocode.bytes(), 0});
  notes.push_back("carried: the KV cache in pages of " + std::to_string(kKvPageSize) +
                  " positions, " + std::to_string(pool.pages_for(capacity)) + " a stream for " +
                  std::to_string(capacity) +
                  " positions (its prompt and the code stage's max_new_token) x " +
                  std::to_string(batch) + " streams = " + std::to_string(pool.pages()) +
                  " pages of " + format_bytes(cache_bytes / static_cast<uint64_t>(pool.pages())) +
                  ", " + format_bytes(cache_bytes));
  return plan;
}

uint64_t Definition::smallest_step_bytes(Backend&, const scheduler::LoadedVoice&,
                                         const scheduler::SchedulerOptions&) const {
  throw not_served(config_.name);
}

std::unique_ptr<scheduler::VoiceDefinition> Family::read(const std::string& directory) const {
  return std::make_unique<Definition>(VoiceConfig::load(directory));
}

std::vector<std::unique_ptr<scheduler::StepKind>> Family::make_kinds(
    DeviceRuntime&, const scheduler::SchedulerOptions&) const {
  throw InputError("voxd serve does not serve ChatTTS voices yet; voxd synth speaks them");
}

}  // namespace voxd::chattts
