#include "families/chattts/gpt_kinds.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/memory_summary.h"
#include "core/workspace_plan.h"
#include "scheduler/page_admission.h"

namespace voxd::chattts {
namespace {

using scheduler::Batch;
using scheduler::Stream;
using Next = RequestGeneration::Next;

struct Candidate {
  std::shared_ptr<Stream> stream;
  double slack;
};

// The history each draw carries: the most tokens either stage's penalty counts.
int64_t window_of(const LoadedModels& models) {
  return RequestGeneration::history_window(models.voice->config());
}

// The positions of a stream's prefill that its next prefill step runs: [begin, end), at most
// `chunk` of them from where the last piece ended.
struct PrefillPiece {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t length() const { return end - begin; }
  bool last(const RequestGeneration& g) const { return end == g.prefill_length(); }
};

PrefillPiece next_piece(const GenerationWork& work, int64_t chunk) {
  const RequestGeneration& g = work.generation;
  const int64_t most =
      work.prefill_piece_limit > 0 ? std::min(chunk, work.prefill_piece_limit) : chunk;
  const int64_t begin = g.prefilled();
  return {begin, std::min(g.prefill_length(), begin + most)};
}

// Which of a piece's positions are text (1) and which code (0), padded to `tokens` with text.
std::vector<int64_t> piece_text_mask(const RequestGeneration& g, const PrefillPiece& piece,
                                     int64_t tokens) {
  std::vector<int64_t> mask = g.prefill_text_mask(piece.begin, piece.end);
  mask.resize(static_cast<size_t>(tokens), 1);
  return mask;
}

// The pages a stream's prefill needs beyond those it holds (a prefill in pieces took them all
// with its first piece).
int64_t prefill_pages_needed(const KvPagePool& pool, const GenerationWork& work) {
  return std::max<int64_t>(0, pool.pages_for(work.generation.prefill_length()) -
                                  static_cast<int64_t>(work.pages.size()));
}

// Default draws for `streams` warm-up streams of a stage, with empty histories.
void placeholder_draws(GptStepIo& io, size_t streams, bool code, const GptConfig& config,
                       int64_t window) {
  const auto rows = static_cast<size_t>(code ? config.num_vq : 1);
  io.code_stage.assign(streams, code ? 1 : 0);
  io.draws.assign(streams, std::vector<TokenDraw>(rows));
  io.history.assign(streams, std::vector<int64_t>(rows * static_cast<size_t>(window), -1));
}

// A stream one of whose stages, from the sentence it is at on, can need more pages than the pool
// has could never finish (every other can, once the pool is its own). Checked at each prefill,
// so at its first, before any of its audio.
bool never_fits(const KvPagePool& pool, const RequestGeneration& generation) {
  return pool.pages_for(generation.widest_sentence().positions) > pool.pages();
}

// never_fits' answer: the sentence is too long for the pool (413), or the pool too small for
// any sentence of the voice (503).
scheduler::StepRefusal pool_too_small(const KvPagePool& pool, const RequestGeneration& generation) {
  const RequestGeneration::Widest widest = generation.widest_sentence();
  const std::string holds = "the KV cache holds " + std::to_string(pool.pages()) + " pages of " +
                            std::to_string(pool.page_size()) + " positions";
  const int64_t least = generation.most_positions(0);
  if (pool.pages_for(least) > pool.pages()) {
    return {.request_too_large = false,
            .code = "kv_cache_full",
            .message = "a ChatTTS stage of this voice can need " + std::to_string(least) +
                       " positions, and " + holds + "; give the server a larger --kv-cache"};
  }
  return {.request_too_large = true,
          .code = "sentence_too_long",
          .message = "sentence " + std::to_string(widest.sentence + 1) + " can need " +
                     std::to_string(widest.positions) + " positions of ChatTTS's GPT, and " +
                     holds + "; split it into shorter sentences"};
}

// A decode step of `lead`'s voice and stage (one head, one table of embeddings, one graph), from
// `candidates` in slack order.
Batch decode_batch_led_by(const std::vector<Candidate>& candidates, const Candidate& lead,
                          const scheduler::Pacing& pacing, scheduler::Clock::time_point now) {
  Batch batch = scheduler::batch_led_by(lead, pacing, now);
  const bool code_stage = work_of(*lead.stream).generation.code_stage();
  for (const Candidate& c : candidates) {
    if (static_cast<int64_t>(batch.items.size()) >= pacing.max_batch) break;
    if (c.stream->voice != batch.voice) continue;
    if (work_of(*c.stream).generation.code_stage() != code_stage) continue;
    batch.items.push_back(c.stream);
  }
  return batch;
}

// `holders`' streams appended to `order`, most slack first.
void append_most_slack_first(std::vector<Candidate>& holders,
                             std::vector<std::shared_ptr<Stream>>& order) {
  std::stable_sort(holders.begin(), holders.end(),
                   [](const Candidate& a, const Candidate& b) { return a.slack > b.slack; });
  for (const Candidate& holder : holders) order.push_back(holder.stream);
}

// The streams of `batch`'s voice that hold pages but are not in it, in the order a decode step
// takes their pages back when the pool runs out, before its own: first those waiting for their
// client to read (they make no progress until it does), then those of the other stage or past
// max_batch with more slack than any stream of the step (the step's own come before the rest);
// most slack first in each group.
std::vector<std::shared_ptr<Stream>> page_holders_outside(
    const Batch& batch, const std::vector<std::shared_ptr<Stream>>& streams,
    const std::function<double(const Stream&)>& slack_of) {
  const std::set<const Stream*> inside = [&] {
    std::set<const Stream*> items;
    for (const auto& stream : batch.items) items.insert(stream.get());
    return items;
  }();
  const double most_inside = batch.items.empty() ? 0.0 : slack_of(*batch.items.back());
  std::vector<Candidate> waiting;
  std::vector<Candidate> others;
  for (const std::shared_ptr<Stream>& stream : streams) {
    const GenerationWork& work = work_of(*stream);
    if (stream->voice != batch.voice || !stream->running() || work.pages.empty() ||
        work.generation.next() != Next::kDecode || inside.contains(stream.get())) {
      continue;
    }
    const double slack = slack_of(*stream);
    if (work.audio_backlogged()) {
      waiting.push_back({stream, slack});
    } else if (slack > most_inside) {
      others.push_back({stream, slack});
    }
  }
  std::vector<std::shared_ptr<Stream>> order;
  append_most_slack_first(waiting, order);
  append_most_slack_first(others, order);
  return order;
}

// The prefills of `lead`'s voice whose pages are free (batch_within_free_pages). A stage is
// admitted when its prefill's pages are free beside a page for every decoding stream of the voice
// (room for the running streams to grow). The pages of streams waiting for their clients to read
// count as free: they make no progress until then, and the step takes their pages back when it
// needs them (batch.preemptible, most slack first), so that listeners who read slowly cannot hold
// the pool against new requests until their deadlines.
Batch prefill_batch_led_by(const std::vector<Candidate>& candidates, const Candidate& lead,
                           const std::vector<std::shared_ptr<Stream>>& streams,
                           const scheduler::Pacing& pacing, scheduler::Clock::time_point now,
                           const std::function<double(const Stream&)>& slack_of) {
  scheduler::VoiceEntry* voice = lead.stream->voice;
  const KvPagePool* pool = voice->models ? models_of(*voice).pages.get() : nullptr;
  int64_t free = 0;
  int64_t to_leave = 0;
  std::vector<Candidate> waiting;
  if (pool != nullptr) {
    free = pool->free_pages();
    for (const std::shared_ptr<Stream>& stream : streams) {
      const GenerationWork& work = work_of(*stream);
      if (stream->voice != voice || work.pages.empty()) continue;
      if (stream->running() && work.generation.next() == Next::kDecode && work.audio_backlogged()) {
        free += static_cast<int64_t>(work.pages.size());
        waiting.push_back({stream, slack_of(*stream)});
      } else {
        --free;
        ++to_leave;
      }
    }
  }
  Batch batch = scheduler::batch_within_free_pages(
      candidates, lead, pool, free, pacing, now,
      [&](const Candidate& c) { return prefill_pages_needed(*pool, work_of(*c.stream)); },
      [&](const Candidate& c) { return never_fits(*pool, work_of(*c.stream).generation); });
  append_most_slack_first(waiting, batch.preemptible);
  batch.pages_to_leave = to_leave;
  return batch;
}

}  // namespace

void draw_tokens(Context& ctx, const Tensor& logits, bool code, const GptConfig& config,
                 int64_t window, size_t first, int64_t count, GptStepIo* io) {
  const int64_t each = code ? config.num_vq : 1;
  const int64_t rows = count * each;
  // A stream of the other stage draws placeholders here: a prefill runs both heads for every
  // stream, so that it allocates as its plan did.
  const auto own = [&](size_t s) { return io != nullptr && (io->code_stage[s] != 0) == code; };
  std::vector<TokenDraw> draws(static_cast<size_t>(rows));
  std::vector<int64_t> history(static_cast<size_t>(rows * window), -1);
  for (size_t s = first; s < first + static_cast<size_t>(count); ++s) {
    if (!own(s)) continue;
    VOXD_CHECK(static_cast<int64_t>(io->draws[s].size()) == each &&
                   static_cast<int64_t>(io->history[s].size()) == each * window,
               "draw_tokens: a stream's draws do not match its head");
    const auto at = static_cast<std::ptrdiff_t>(s - first) * each;
    std::copy(io->draws[s].begin(), io->draws[s].end(), draws.begin() + at);
    std::copy(io->history[s].begin(), io->history[s].end(), history.begin() + at * window);
  }
  const std::vector<int64_t> tokens = sample_rows(ctx, logits, draws, history, window);
  for (size_t s = first; s < first + static_cast<size_t>(count); ++s) {
    if (!own(s)) continue;
    const auto at = static_cast<std::ptrdiff_t>(s - first) * each;
    io->tokens[s].assign(tokens.begin() + at, tokens.begin() + at + each);
  }
}

void gpt_step(Context& ctx, const Gpt& gpt, PagedKvCache& cache, const GptStepShape& shape,
              int64_t window, GptStepIo* io) {
  const GptConfig& c = gpt.config();
  const int64_t b = shape.batch;
  const int64_t t = shape.tokens;
  const auto rows = static_cast<size_t>(b * t);
  VOXD_CHECK(shape.prefill || !(shape.text_head && shape.code_head),
             "a decode step is of one stage: the code heads or the text head");
  std::vector<int64_t> ids(rows * static_cast<size_t>(c.num_vq), 0);
  // Planning: a prefill's positions are of the kinds its shape says (text, code or both); a decode
  // step's are its stage's.
  std::vector<int64_t> mask(
      rows, shape.prefill ? (shape.text_positions ? 1 : 0) : (shape.code_head ? 0 : 1));
  if (shape.prefill && shape.text_positions && shape.code_positions) mask[rows - 1] = 0;
  if (io != nullptr) {
    for (int64_t s = 0; s < b; ++s) {
      const auto i = static_cast<size_t>(s);
      std::copy(io->ids[i].begin(), io->ids[i].end(),
                ids.begin() + static_cast<std::ptrdiff_t>(s * t * c.num_vq));
      std::copy(io->text_mask[i].begin(), io->text_mask[i].end(),
                mask.begin() + static_cast<std::ptrdiff_t>(s * t));
    }
  }
  Tensor embedded =
      gpt.embed(ctx, Tensor::from_vector({b, t, c.num_vq}, ids), Tensor::from_vector({b, t}, mask));
  if (shape.prefill) {
    // The speaker vector at each [spk_emb] position, through the host (every prefill, so that the
    // plan does not depend on who has a speaker).
    Tensor host = ops::to_host(ctx, embedded);
    if (io != nullptr) {
      for (int64_t s = 0; s < b; ++s) {
        const std::vector<float>* speaker = io->speakers[static_cast<size_t>(s)];
        if (speaker == nullptr) continue;
        for (int64_t p : io->speaker_positions[static_cast<size_t>(s)]) {
          std::copy(speaker->begin(), speaker->end(),
                    host.data<float>() + (s * t + p) * c.hidden_size);
        }
      }
    }
    embedded = ops::to_device(ctx, host, embedded.dtype());
  }
  const Tensor table =
      io != nullptr ? page_table(io->pages, shape.table_width)
                    : Tensor::from_vector(
                          {b, shape.table_width},
                          std::vector<int64_t>(static_cast<size_t>(b * shape.table_width), -1));
  const std::vector<int64_t> positions =
      io != nullptr ? io->positions : std::vector<int64_t>(static_cast<size_t>(b), 0);
  // Each stream within the GPT's positions by its own length: a piece padded to the step's
  // longest may reach past them with rows no one reads (their keys and values fall outside the
  // stream's pages and are dropped).
  for (int64_t s = 0; s < b; ++s) {
    const auto i = static_cast<size_t>(s);
    const int64_t end = positions[i] + (io != nullptr && shape.prefill ? io->last[i] + 1 : t);
    VOXD_CHECK(end <= c.max_position_embeddings,
               "a GPT step past the GPT's positions: its stages are bounded by them");
  }
  const Tensor hidden =
      gpt.forward(ctx, embedded, cache, table, Tensor::from_vector({b}, positions));
  if (io != nullptr) {
    io->hidden.assign(static_cast<size_t>(b), {});
    io->tokens.assign(static_cast<size_t>(b), {});
  }
  // The draws on each stream's last position, the whole batch at once (a prefill's last
  // positions gathered first, each stream at its own length). A prefill step runs every head its
  // shape has for every stream, so that it allocates as its plan did whatever stage each stream
  // is in (draw_tokens draws placeholders for the streams of the other stage).
  Tensor last = hidden;
  if (shape.prefill) {
    std::vector<int64_t> rows_at(static_cast<size_t>(b));
    for (int64_t s = 0; s < b; ++s) {
      rows_at[static_cast<size_t>(s)] =
          s * t + (io != nullptr ? io->last[static_cast<size_t>(s)] : t - 1);
    }
    last = ops::embedding(ctx, Tensor::from_vector({b, 1}, rows_at),
                          ops::contiguous(ctx, hidden).reshape({b * t, c.hidden_size}));
  }
  const Tensor h = ops::to_host(ctx, last);
  for (const bool code : {false, true}) {
    if (!(code ? shape.code_head : shape.text_head)) continue;
    draw_tokens(ctx, code ? gpt.code_logits(ctx, last) : gpt.text_logits(ctx, last), code, c,
                window, 0, b, io);
  }
  if (io == nullptr) return;
  const std::vector<float> values = h.to_float_vector();
  const auto size = static_cast<size_t>(c.hidden_size);
  for (int64_t s = 0; s < b; ++s) {
    const auto begin = values.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(s) * size);
    io->hidden[static_cast<size_t>(s)].assign(begin, begin + static_cast<std::ptrdiff_t>(size));
  }
}

GptKind::GptKind(DeviceRuntime& runtime, bool prefill, bool cuda_graphs,
                 int64_t prefill_chunk_tokens)
    : runtime_(runtime),
      prefill_(prefill),
      cuda_graphs_(cuda_graphs),
      prefill_chunk_(prefill_chunk_tokens) {
  VOXD_CHECK(prefill_chunk_ >= 1, "a prefill chunk of no tokens");
}

double GptKind::laxity(const Stream& stream, const scheduler::Pacing& pacing,
                       scheduler::Clock::time_point now) {
  const double slack = stream.slack(now, pacing.first_audio_due_s);
  if (stream.first_audio || stream.voice->models == nullptr) return slack;
  const double step_s = models_of(*stream.voice).decode_step_seconds;
  return slack - static_cast<double>(work_of(stream).frames_before_next_chunk()) * step_s;
}

scheduler::Batch GptKind::propose(const std::vector<std::shared_ptr<Stream>>& streams,
                                  const scheduler::Pacing& pacing,
                                  scheduler::Clock::time_point now) {
  const Next wanted = prefill_ ? Next::kPrefill : Next::kDecode;
  std::vector<Candidate> candidates;
  for (const std::shared_ptr<Stream>& stream : streams) {
    const GenerationWork& work = work_of(*stream);
    // A prefill in pieces goes on whatever its audio: its pages come back only once it decodes
    // (a decoding stream waiting for its client gives them back; one mid-prefill cannot).
    const bool mid_prefill =
        work.generation.next() == Next::kPrefill && work.generation.prefilled() > 0;
    if (!stream->running() || work.generation.next() != wanted ||
        (work.audio_backlogged() && !mid_prefill)) {
      continue;
    }
    candidates.push_back({stream, laxity(*stream, pacing, now)});
  }
  (void)scheduler::lead_by_slack(candidates, pacing, now);  // orders them
  if (!prefill_) {
    if (candidates.empty()) return {};
    Batch batch = decode_batch_led_by(candidates, candidates.front(), pacing, now);
    batch.preemptible = page_holders_outside(
        batch, streams, [&](const Stream& stream) { return laxity(stream, pacing, now); });
    return batch;
  }
  // Each voice has a pool of its own: when the most urgent stage of one voice waits for pages,
  // the next voice's may still go.
  std::set<const scheduler::VoiceEntry*> tried;
  for (const Candidate& lead : candidates) {
    if (!tried.insert(lead.stream->voice).second) continue;
    Batch batch =
        prefill_batch_led_by(candidates, lead, streams, pacing, now,
                             [&](const Stream& stream) { return laxity(stream, pacing, now); });
    if (!batch.items.empty()) return batch;
  }
  return {};
}

GptStepShape GptKind::shape_of(const Batch& batch, size_t size) const {
  GptStepShape shape;
  shape.batch = static_cast<int64_t>(size);
  shape.prefill = prefill_;
  shape.tokens = 1;
  const KvPagePool& pool = *models_of(*batch.voice).pages;
  std::vector<PrefillPiece> pieces;
  for (size_t i = 0; i < size; ++i) {
    const GenerationWork& work = work_of(*batch.items[i]);
    if (prefill_) {
      pieces.push_back(next_piece(work, prefill_chunk_));
      shape.tokens = std::max(shape.tokens, pieces.back().length());
    }
    shape.table_width = std::max(shape.table_width, pool.pages_for(work.generation.capacity()));
    (work.generation.code_stage() ? shape.code_head : shape.text_head) = true;
  }
  if (!prefill_) return shape;
  // The embedding's work (and memory) depends on which kinds of positions the step has.
  shape.text_positions = false;
  for (size_t i = 0; i < size; ++i) {
    for (int64_t is_text :
         piece_text_mask(work_of(*batch.items[i]).generation, pieces[i], shape.tokens)) {
      (is_text != 0 ? shape.text_positions : shape.code_positions) = true;
    }
  }
  return shape;
}

const ArenaLayout& GptKind::plan(scheduler::VoiceEntry& voice, const GptStepShape& shape) {
  const auto key = std::tuple_cat(
      std::make_tuple(static_cast<const scheduler::VoiceEntry*>(&voice)), shape.key());
  return plans_.get(key, [&] {
    LoadedModels& models = models_of(voice);
    return plan_workspace(runtime_.backend(), [&](Context& ctx) {
      gpt_step(ctx, models.voice->gpt(), models.cache, shape, window_of(models), nullptr);
    });
  });
}

bool GptKind::use_graphs() const {
  return cuda_graphs_ && !prefill_ && runtime_.backend().can_capture();
}

DecodeGraphs& GptKind::graphs_of(scheduler::VoiceEntry& voice) {
  LoadedModels& models = models_of(voice);
  if (!models.decode_graphs) {
    const Gpt& gpt = models.voice->gpt();
    models.decode_graphs = std::make_unique<DecodeGraphs>(
        runtime_.persistent_context(), gpt, models.cache,
        models.pages->pages_for(gpt.config().max_position_embeddings));
  }
  return *models.decode_graphs;
}

const ArenaLayout& GptKind::embed_plan(scheduler::VoiceEntry& voice, int64_t batch, bool code) {
  return embed_plans_.get(std::make_tuple(&voice, batch, code), [&] {
    const LoadedModels& models = models_of(voice);
    const Gpt& gpt = models.voice->gpt();
    const GptConfig& c = gpt.config();
    Backend& backend = runtime_.backend();
    return plan_workspace(backend, [&](Context& ctx) {
      // The embedding lives through the step, as run_graphed holds it.
      const Tensor embedded = gpt.embed(
          ctx, Tensor::zeros({batch, 1, c.num_vq}, DType::I64),
          Tensor::from_vector({batch, 1}, std::vector<int64_t>(static_cast<size_t>(batch), !code)));
      // The logits are the graph's (in its own arena): planned elsewhere, drawn from here.
      WorkspaceArena graph_arena(backend.device());
      Context graph = Context::for_planning(backend, graph_arena);
      const Tensor logits =
          code ? ops::empty(graph, {batch, 1, c.num_vq, c.num_audio_tokens}, DType::F32)
               : ops::empty(graph, {batch, 1, c.num_text_tokens}, DType::F32);
      draw_tokens(ctx, logits, code, c, window_of(models), 0, batch, nullptr);
    });
  });
}

uint64_t GptKind::footprint(const Batch& batch, size_t size) {
  if (use_graphs()) {
    const auto streams = static_cast<int64_t>(size);
    const bool code = work_of(*batch.items.front()).generation.code_stage();
    const uint64_t record = graphs_of(*batch.voice).bytes_to_record(streams, code);
    return scheduler::MemoryBudget::footprint(embed_plan(*batch.voice, streams, code).bytes()) +
           (record > 0 ? scheduler::MemoryBudget::footprint(record) : 0);
  }
  return scheduler::MemoryBudget::footprint(plan(*batch.voice, shape_of(batch, size)).bytes());
}

scheduler::StepRefusal GptKind::too_big(const Batch& batch, uint64_t footprint,
                                        uint64_t available) const {
  // A sentence's prefill is bounded by the front end's longest sentence and a stream's by the
  // GPT's positions: a step of one that does not fit is the server's to fix, not the client's.
  const std::string what =
      prefill_
          ? "a prefill of " +
                std::to_string(next_piece(work_of(*batch.items.front()), prefill_chunk_).length()) +
                " tokens"
          : "one decode step";
  return {.request_too_large = false,
          .code = "insufficient_memory",
          .message = what + " needs " + format_bytes(footprint) +
                     " of device memory for ChatTTS's GPT, more than the " +
                     format_bytes(available) +
                     " this server has for one step; give it more device memory (a larger "
                     "--gpu-memory-limit, or a device it does not share) or a smaller --kv-cache"};
}

bool GptKind::shrink(Batch& batch) {
  if (!prefill_) return false;
  GenerationWork& work = work_of(*batch.items.front());
  const int64_t length = next_piece(work, prefill_chunk_).length();
  if (length <= kLeastPrefillPiece) return false;
  work.prefill_piece_limit = std::max(kLeastPrefillPiece, length / 2);
  return true;
}

scheduler::StepOutput GptKind::run(const Batch& batch, scheduler::MemoryBudget& budget) {
  LoadedModels& models = models_of(*batch.voice);
  const auto started = scheduler::Clock::now();
  scheduler::StepOutput out = run_step(batch, models, budget);
  if (!prefill_) {
    const double seconds = std::chrono::duration<double>(scheduler::Clock::now() - started).count();
    double& average = models.decode_step_seconds;
    average = average == 0.0 ? seconds : 0.9 * average + 0.1 * seconds;
  }
  return out;
}

scheduler::StepOutput GptKind::run_step(const Batch& batch, LoadedModels& models,
                                        scheduler::MemoryBudget& budget) {
  KvPagePool& pool = *models.pages;
  const size_t n = batch.items.size();
  scheduler::StepOutput out;
  out.audio.resize(n);
  out.errors.resize(n);
  // A prefill takes the pages of its positions; a decode step one more page for each stream
  // whose last is full.
  std::vector<size_t> ready;
  std::vector<bool> preempted(n, false);
  size_t outside = 0;  // batch.preemptible taken back so far
  // Takes the next stream of batch.preemptible's pages back, if it still decodes over them.
  const auto take_back_next_outside = [&] {
    GenerationWork& holder = work_of(*batch.preemptible[outside++]);
    if (holder.generation.next() == Next::kDecode && !holder.pages.empty()) {
      holder.preempt();
      ++out.preempted;
    }
  };
  for (size_t i = 0; i < n; ++i) {
    GenerationWork& work = work_of(*batch.items[i]);
    RequestGeneration& g = work.generation;
    work.pool = &pool;
    if (prefill_) {
      if (never_fits(pool, g)) {
        out.errors[i] =
            std::make_exception_ptr(scheduler::StepRefusalError(pool_too_small(pool, g)));
        continue;
      }
      // Streams waiting for their clients give their pages back (batch.preemptible) until the
      // prefill's pages are free beside the page each decoding stream may need next; out of
      // pages even so, they were taken by others since propose() (a smaller batch ran first):
      // it waits.
      const int64_t needed = prefill_pages_needed(pool, work);
      while (needed > 0 && pool.free_pages() - batch.pages_to_leave < needed &&
             outside < batch.preemptible.size()) {
        take_back_next_outside();
      }
      if (!pool.grow(work.pages, g.prefill_length())) continue;
    } else {
      // Out of pages: the streams outside the step that hold pages and may give them back first
      // (batch.preemptible), then the stream of the step with the most slack (the last one
      // still holding pages, which may be this one), until the page is found.
      while (!preempted[i] && !pool.grow(work.pages, g.positions() + 1)) {
        if (outside < batch.preemptible.size()) {
          take_back_next_outside();
          continue;
        }
        size_t victim = n - 1;
        while (preempted[victim]) --victim;  // stops at i, which is not preempted
        work_of(*batch.items[victim]).preempt();
        preempted[victim] = true;
        ++out.preempted;
      }
      if (preempted[i]) continue;
    }
    ready.push_back(i);
  }
  if (ready.empty()) return out;
  Batch running = batch;
  running.items.clear();
  for (size_t i : ready) running.items.push_back(batch.items[i]);
  // A step shrunk by preemption runs in the memory its whole batch was given: through the whole
  // batch's graph (recorded, or its recording counted in that memory), whose rows past the
  // streams left have no pages; eagerly, on a plan no larger than the whole batch's.
  if (!use_graphs() && ready.size() < n && !budget.fits(footprint(running, running.items.size()))) {
    throw Error("chattts: a smaller GPT step does not fit the memory its batch was given");
  }
  const GptStepShape shape = shape_of(running, running.items.size());
  const int64_t window = window_of(models);
  GptStepIo io;
  std::vector<PrefillPiece> pieces;
  for (const auto& stream : running.items) {
    GenerationWork& work = work_of(*stream);
    const RequestGeneration& g = work.generation;
    io.code_stage.push_back(g.code_stage() ? 1 : 0);
    io.draws.emplace_back();
    io.history.emplace_back();
    g.next_draws(window, io.draws.back(), io.history.back());
    if (prefill_) {
      const PrefillPiece piece = next_piece(work, prefill_chunk_);
      pieces.push_back(piece);
      io.ids.push_back(g.prefill_ids(piece.begin, piece.end));
      io.text_mask.push_back(piece_text_mask(g, piece, shape.tokens));
      io.last.push_back(piece.length() - 1);
      io.positions.push_back(piece.begin);
      io.speakers.push_back(g.speaker());
      std::vector<int64_t> speaker_at;
      for (int64_t p : g.speaker_positions()) {
        if (p >= piece.begin && p < piece.end) speaker_at.push_back(p - piece.begin);
      }
      io.speaker_positions.push_back(std::move(speaker_at));
    } else {
      io.ids.push_back(g.next_ids());
      io.text_mask.push_back({g.next_is_text() ? 1 : 0});
      io.last.push_back(0);
      io.positions.push_back(g.positions());
      io.speakers.push_back(nullptr);
      io.speaker_positions.emplace_back();
    }
    io.pages.push_back(&work.pages);
  }
  if (use_graphs()) {
    run_graphed(*batch.voice, shape.code_head, io, static_cast<int64_t>(n));
  } else {
    run_in_workspace(runtime_.backend(), runtime_.allocator(), plan(*batch.voice, shape),
                     [&](Context& ctx) {
                       gpt_step(ctx, models.voice->gpt(), models.cache, shape, window, &io);
                     });
  }
  // Every stream takes its tokens (a voxd::Error is the stream's alone); pages go back after.
  for (size_t r = 0; r < ready.size(); ++r) {
    GenerationWork& work = work_of(*batch.items[ready[r]]);
    if (prefill_ && !pieces[r].last(work.generation)) {
      // Its positions are cached; the tokens drawn at the piece's end are not the stage's.
      work.generation.prefilled_to(pieces[r].end);
      continue;
    }
    if (prefill_) work.prefill_piece_limit = 0;
    try {
      work.generation.advance(io.tokens[r], io.hidden[r]);
      work.collect();
      out.audio[ready[r]] = work.take_finished_pauses();
    } catch (const Error&) {
      out.errors[ready[r]] = std::current_exception();
    }
    if (out.errors[ready[r]] || work.generation.next() != Next::kDecode) work.release_pages();
  }
  return out;
}

void GptKind::run_graphed(scheduler::VoiceEntry& voice, bool code, GptStepIo& io,
                          int64_t graph_batch) {
  const LoadedModels& models = models_of(voice);
  const Gpt& gpt = models.voice->gpt();
  const GptConfig& c = gpt.config();
  const auto batch = static_cast<int64_t>(io.ids.size());
  std::vector<int64_t> ids;
  for (const std::vector<int64_t>& row : io.ids) ids.insert(ids.end(), row.begin(), row.end());
  DecodeGraphs& graphs = graphs_of(voice);
  io.tokens.assign(static_cast<size_t>(batch), {});
  io.hidden.assign(static_cast<size_t>(batch), {});
  std::vector<float> hidden;
  run_in_workspace(
      runtime_.backend(), runtime_.allocator(), embed_plan(voice, batch, code), [&](Context& ctx) {
        const Tensor embedded =
            gpt.embed(ctx, Tensor::from_vector({batch, 1, c.num_vq}, ids),
                      Tensor::from_vector({batch, 1},
                                          std::vector<int64_t>(static_cast<size_t>(batch), !code)));
        const DecodeGraphs::Output out =
            graphs.run(ctx, embedded, io.pages, io.positions, code, graph_batch);
        draw_tokens(ctx, out.logits, code, c, window_of(models), 0, batch, &io);
        hidden = ops::to_host(ctx, out.hidden).to_float_vector();
      });
  const auto size = static_cast<size_t>(c.hidden_size);
  for (size_t s = 0; s < io.hidden.size(); ++s) {
    const auto first = hidden.begin() + static_cast<std::ptrdiff_t>(s * size);
    io.hidden[s].assign(first, first + static_cast<std::ptrdiff_t>(size));
  }
}

void GptKind::warm_up(scheduler::VoiceEntry& voice, const scheduler::Pacing& pacing,
                      scheduler::MemoryBudget& budget) {
  if (use_graphs()) {
    // Records every graph a batch up to max_batch can use, on rows without pages (nothing is
    // written to the cache).
    const LoadedModels& models = models_of(voice);
    const GptConfig& config = models.voice->gpt().config();
    for (int64_t rows = 1; rows <= DecodeGraphs::padded(pacing.max_batch); rows *= 2) {
      for (const bool code : {true, false}) {
        const uint64_t record = graphs_of(voice).bytes_to_record(rows, code);
        if (record == 0) continue;
        if (!budget.fits(
                scheduler::MemoryBudget::footprint(record) +
                scheduler::MemoryBudget::footprint(embed_plan(voice, rows, code).bytes()))) {
          return;
        }
        const std::vector<int64_t> none;
        GptStepIo io;
        io.ids.assign(static_cast<size_t>(rows),
                      std::vector<int64_t>(static_cast<size_t>(config.num_vq), 0));
        io.pages.assign(static_cast<size_t>(rows), &none);
        io.positions.assign(static_cast<size_t>(rows), 0);
        placeholder_draws(io, static_cast<size_t>(rows), code, config, window_of(models));
        run_graphed(voice, code, io);
      }
    }
    return;
  }
  if (!prefill_) return;
  LoadedModels& models = models_of(voice);
  KvPagePool& pool = *models.pages;
  constexpr int64_t kTokens = 8;
  GptStepShape shape{.batch = 1,
                     .tokens = kTokens,
                     .table_width = pool.pages_for(kTokens),
                     .prefill = true,
                     .text_head = true,
                     .code_head = true};
  const ArenaLayout& layout = plan(voice, shape);
  std::vector<int64_t> pages;
  if (!pool.grow(pages, kTokens)) return;
  // The page goes back however the made-up step ends (a warm-up failure is logged and ignored).
  try {
    if (budget.fits(scheduler::MemoryBudget::footprint(layout.bytes()))) {
      warm_up_prefill(models, pages, shape, layout);
    }
  } catch (...) {
    pool.release(pages);
    throw;
  }
  pool.release(pages);
}

void GptKind::warm_up_prefill(LoadedModels& models, std::vector<int64_t>& pages,
                              const GptStepShape& shape, const ArenaLayout& layout) {
  const int64_t tokens = shape.tokens;
  GptStepIo io;
  io.ids = {
      std::vector<int64_t>(static_cast<size_t>(tokens * models.voice->gpt().config().num_vq), 1)};
  io.text_mask = {std::vector<int64_t>(tokens, 1)};
  io.last = {tokens - 1};
  io.pages = {&pages};
  io.positions = {0};
  io.speakers = {nullptr};
  io.speaker_positions = {{}};
  placeholder_draws(io, 1, false, models.voice->gpt().config(), window_of(models));
  run_in_workspace(runtime_.backend(), runtime_.allocator(), layout, [&](Context& ctx) {
    gpt_step(ctx, models.voice->gpt(), models.cache, shape, window_of(models), &io);
  });
}

}  // namespace voxd::chattts
