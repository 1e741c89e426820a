// The ChatTTS GPT's steps in the server, batched across streams of one voice (continuous
// batching, vLLM's way): the prefill kind runs the positions of streams starting a stage
// (refine-text or audio-code) or recomputing a preempted one, padded to the longest; the decode
// kind runs one position for every stream in a stage, each at its own length, over the paged cache.
// A stream holds the pages of the voice's KV pool its positions fill, one more when its last is
// full; when the pool has none, a decoding stream gives its pages back and is recomputed later
// (preemption), so an admitted stream never fails for want of pages: first those outside the
// step waiting for their client to read, then the other stage's with more slack than any of the
// step's, then the step's own, most slack first. A stage
// is admitted when its prefill's pages fit beside a page for every decoding stream. After each
// forward, every stream's next tokens are drawn on the device (ops::sample_tokens) from its own
// logits, history and seed, so a stream's tokens do not depend on what it was batched with; only
// the tokens and hidden states come back to the host. A
// decode step runs the streams of one stage (code or text) and, on a backend that records, as a
// recorded graph at the next power-of-two batch (decode_graphs.h); plans are cached by shape.
#pragma once

#include <cstdint>
#include <tuple>
#include <vector>

#include "core/workspace_arena.h"
#include "families/chattts/served.h"
#include "scheduler/memory_budget.h"
#include "scheduler/plan_cache.h"
#include "scheduler/step_kind.h"

namespace voxd::chattts {

// The shape a GPT step is planned for: streams, positions each (the longest prefill piece, or
// 1), pages in the widest table (a stage's capacity), which heads it reads, and which kinds of
// positions a prefill embeds: text (prompts, and the padding), code (a code stage recomputed after
// preemption), or both.
struct GptStepShape {
  int64_t batch = 0;
  int64_t tokens = 0;
  int64_t table_width = 0;
  bool prefill = false;
  bool text_head = false;
  bool code_head = false;
  bool text_positions = true;
  bool code_positions = false;
  // Every field: what a plan is cached by.
  auto key() const {
    return std::make_tuple(batch, tokens, table_width, prefill, text_head, code_head,
                           text_positions, code_positions);
  }
};

struct GptStepIo;

// The fewest positions a prefill step is cut to when the memory budget cannot hold a longer one:
// the prompt the server's readiness is checked with (Definition::smallest_step_bytes).
inline constexpr int64_t kLeastPrefillPiece = 16;

class GptKind : public scheduler::StepKind {
 public:
  // `cuda_graphs`: decode steps through recorded graphs where the backend records them. A
  // prefill step runs at most `prefill_chunk_tokens` (≥ 1) positions of each stream: a longer
  // prefill (a preempted stage recomputed over all its positions) goes in pieces over the cache,
  // so that no step's memory grows with how far a stream had come.
  GptKind(DeviceRuntime& runtime, bool prefill, bool cuda_graphs, int64_t prefill_chunk_tokens);

  const char* name() const override { return prefill_ ? "prefill" : "decode"; }
  scheduler::Batch propose(const std::vector<std::shared_ptr<scheduler::Stream>>& streams,
                           const scheduler::Pacing& pacing,
                           scheduler::Clock::time_point now) override;
  uint64_t footprint(const scheduler::Batch& batch, size_t size) override;
  scheduler::StepRefusal too_big(const scheduler::Batch& batch, uint64_t footprint,
                                 uint64_t available) const override;
  // A prefill piece of the first stream halved, down to kLeastPrefillPiece positions.
  bool shrink(scheduler::Batch& batch) override;
  scheduler::StepOutput run(const scheduler::Batch& batch,
                            scheduler::MemoryBudget& budget) override;
  // Prefill: one made-up prompt of 8 tokens through the GPT, so that kernels and the BLAS are
  // loaded before the first request.
  void warm_up(scheduler::VoiceEntry& voice, const scheduler::Pacing& pacing,
               scheduler::MemoryBudget& budget) override;

 private:
  // A stream's slack less the time its remaining decode steps to its first audio take at the
  // voice's recent step time (least laxity first): streams waiting for a prefill are weighed by
  // the whole first chunk, so that they join the decoding batch early instead of waiting for a
  // stream that arrived a moment before them to reach its first audio.
  static double laxity(const scheduler::Stream& stream, const scheduler::Pacing& pacing,
                       scheduler::Clock::time_point now);
  // run() without the timing of decode steps.
  scheduler::StepOutput run_step(const scheduler::Batch& batch, LoadedModels& models,
                                 scheduler::MemoryBudget& budget);
  GptStepShape shape_of(const scheduler::Batch& batch, size_t size) const;
  const ArenaLayout& plan(scheduler::VoiceEntry& voice, const GptStepShape& shape);
  // warm_up's made-up prefill of `shape` over `pages` in a workspace of `layout`.
  void warm_up_prefill(LoadedModels& models, std::vector<int64_t>& pages, const GptStepShape& shape,
                       const ArenaLayout& layout);
  // Whether decode steps of `voice` run as recorded graphs, and its graphs (made on first use).
  bool use_graphs() const;
  DecodeGraphs& graphs_of(scheduler::VoiceEntry& voice);
  // The plan of what a graphed step runs around its graph: the embedding before it (ids come
  // from the host) and the draws after it.
  const ArenaLayout& embed_plan(scheduler::VoiceEntry& voice, int64_t batch, bool code);
  // A decode step of io's streams (all in the code stage, or all in the text stage) through the
  // voice's recorded graph of a step of `graph_batch` streams (at least io's; 0: io's): io's
  // tokens and hidden states filled.
  void run_graphed(scheduler::VoiceEntry& voice, bool code, GptStepIo& io, int64_t graph_batch = 0);

  DeviceRuntime& runtime_;
  bool prefill_;
  bool cuda_graphs_;
  int64_t prefill_chunk_;
  scheduler::PlanCache<std::tuple<const scheduler::VoiceEntry*, int64_t, bool>> embed_plans_;
  scheduler::PlanCache<decltype(std::tuple_cat(
      std::make_tuple(static_cast<const scheduler::VoiceEntry*>(nullptr)), GptStepShape{}.key()))>
      plans_;
};

// What one GPT step of `shape` reads and gives back on the host, per stream in order.
struct GptStepIo {
  // In: per stream, the ids of its positions ([tokens][num_vq] flattened, padded with 0), whether
  // each is a text position (padding: text), its last real position (prefill: its length - 1),
  // its pages, its first position (0 for a prefill), the speaker vector with the positions it
  // replaces, whether it reads the code heads (else the text head), and its next tokens' draws
  // with their histories (RequestGeneration::next_draws, `window` tokens a row).
  std::vector<std::vector<int64_t>> ids;
  std::vector<std::vector<int64_t>> text_mask;
  std::vector<int64_t> last;
  std::vector<const std::vector<int64_t>*> pages;
  std::vector<int64_t> positions;
  std::vector<const std::vector<float>*> speakers;
  std::vector<std::vector<int64_t>> speaker_positions;
  std::vector<char> code_stage;
  std::vector<std::vector<TokenDraw>> draws;
  std::vector<std::vector<int64_t>> history;
  // Out: per stream, the tokens drawn at its last position (one per draw) and the hidden state
  // there.
  std::vector<std::vector<int64_t>> tokens;
  std::vector<std::vector<float>> hidden;
};

// One GPT step on ctx (a planning context when io is null: the same allocations, no reads), its
// draws with histories `window` tokens wide.
void gpt_step(Context& ctx, const Gpt& gpt, PagedKvCache& cache, const GptStepShape& shape,
              int64_t window, GptStepIo* io);

// Draws the next tokens of `count` streams, io's from `first` on, from their head's logits
// [count, 1, ...] (the code heads' when `code`, on ctx's device) into io->tokens, on ctx (a
// planning context when io is null: the same allocations; the logits may then come from
// another). A stream of the other stage (io->code_stage) draws a placeholder and keeps its
// tokens.
void draw_tokens(Context& ctx, const Tensor& logits, bool code, const GptConfig& config,
                 int64_t window, size_t first, int64_t count, GptStepIo* io);

}  // namespace voxd::chattts
