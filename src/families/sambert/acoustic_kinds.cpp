#include "families/sambert/acoustic_kinds.h"

#include <algorithm>
#include <deque>
#include <exception>
#include <set>
#include <string>

#include "core/error.h"
#include "core/memory_summary.h"
#include "families/sambert/steps.h"
#include "scheduler/page_admission.h"

namespace voxd::sambert {
namespace {

using scheduler::Batch;
using scheduler::Stream;
using scheduler::VoiceEntry;
using Stage = Utterance::Stage;

// An utterance joins the lead's encoder batch when their token counts are within this factor of
// each other (padding is masked, so a wider band costs time, not correctness).
constexpr double kLengthBand = 1.25;
// Token counts are padded to a multiple of this, decoder steps to whole pages: fewer shapes.
constexpr int64_t kTokenBucket = 8;

struct Candidate {
  std::shared_ptr<Stream> stream;
  double slack;
};

int64_t round_up(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

int64_t next_power_of_two(int64_t value) {
  int64_t p = 1;
  while (p < value) p *= 2;
  return p;
}

// Seconds of audio in `frames` frames of `voice`.
double seconds_of(const VoiceEntry& voice, int64_t frames) {
  const VoiceConfig& config = config_of(voice);
  return static_cast<double>(frames * config.hop_length) / static_cast<double>(config.sample_rate);
}

// Seconds of audio a stream will still make from utterances past their prefill: the next
// utterance's prefill is needed no sooner than that (its slack beyond the stream's own).
double prefilled_audio_s(const Stream& stream) {
  int64_t frames = 0;
  for (const UtteranceAudio& a : work_of(stream).audio) frames += a.frames - a.vocoded;
  return seconds_of(*stream.voice, frames);
}

// Seconds of audio a stream will still make from utterances whose frames are known (prefilled
// or encoded): the next utterance to encode is needed no sooner than that.
double known_audio_s(const Stream& stream) {
  int64_t frames = 0;
  for (const Utterance& u : work_of(stream).utterances) {
    if (u.stage == Stage::kEncoded) frames += u.alignment.frames;
  }
  return prefilled_audio_s(stream) + seconds_of(*stream.voice, frames);
}

// The padded token count of an encoder step whose longest utterance has `tokens`: a multiple
// of kTokenBucket, but never past the stored position table when the utterances fit it.
int64_t padded_tokens(const Sambert& model, int64_t tokens) {
  const int64_t padded = round_up(tokens, kTokenBucket);
  return tokens <= model.stored_positions() ? std::min(padded, model.stored_positions()) : padded;
}

int64_t tokens_of(const Stream& stream) {
  return static_cast<int64_t>(work_of(stream).next_to_encode()->tokens.linguistic.size());
}

int64_t longest_tokens(const Batch& batch, size_t size) {
  int64_t longest = 0;
  for (size_t i = 0; i < size; ++i) longest = std::max(longest, tokens_of(*batch.items[i]));
  return longest;
}

// The utterance a prefill or decode step takes: the stream's first.
const Utterance& front(const Stream& stream) {
  return work_of(stream).utterances.front();
}

int64_t longest_steps(const Batch& batch, size_t size) {
  int64_t longest = 0;
  for (size_t i = 0; i < size; ++i) {
    longest = std::max(longest, front(*batch.items[i]).alignment.steps);
  }
  return longest;
}

int64_t pages_needed(const Utterance& u) {
  return utterance_pages(u.alignment.steps);
}

}  // namespace

// ---- EncodeKind ----------------------------------------------------------------------------

Batch EncodeKind::propose(const std::vector<std::shared_ptr<Stream>>& streams,
                          const scheduler::Pacing& pacing, scheduler::Clock::time_point now) {
  std::vector<Candidate> candidates;
  for (const std::shared_ptr<Stream>& stream : streams) {
    if (!stream->running() || work_of(*stream).next_to_encode() == nullptr) continue;
    candidates.push_back(
        {stream, stream->slack(now, pacing.first_audio_due_s) + known_audio_s(*stream)});
  }
  Batch batch = scheduler::lead_by_slack(candidates, pacing, now);
  if (candidates.empty()) return batch;
  const auto tokens = static_cast<double>(tokens_of(*candidates.front().stream));
  for (const Candidate& c : candidates) {
    if (static_cast<int64_t>(batch.items.size()) >= pacing.max_batch) break;
    const auto length = static_cast<double>(tokens_of(*c.stream));
    if (c.stream->voice == batch.voice && length <= tokens * kLengthBand &&
        length * kLengthBand >= tokens) {
      batch.items.push_back(c.stream);
    }
  }
  return batch;
}

const ArenaLayout& EncodeKind::plan(const VoiceEntry& voice, int64_t batch, int64_t padded) {
  return plans_.get(std::make_tuple(&voice, batch, padded), [&] {
    return plan_encode(runtime_.backend(), models_of(voice).voice->acoustic(), batch, padded);
  });
}

uint64_t EncodeKind::footprint(const Batch& batch, size_t size) {
  const Sambert& model = models_of(*batch.voice).voice->acoustic();
  return scheduler::MemoryBudget::footprint(plan(*batch.voice, static_cast<int64_t>(size),
                                                 padded_tokens(model, longest_tokens(batch, size)))
                                                .bytes());
}

scheduler::StepRefusal EncodeKind::too_big(const Batch& batch, uint64_t footprint,
                                           uint64_t available) const {
  return {.request_too_large = true,
          .code = "sentence_too_long",
          .message = "an utterance of " + std::to_string(longest_tokens(batch, 1)) +
                     " tokens needs " + format_bytes(footprint) +
                     " of device memory for the Sambert encoder, more than the " +
                     format_bytes(available) +
                     " this server has for one step; split it into shorter utterances"};
}

scheduler::StepOutput EncodeKind::run(const Batch& batch, scheduler::MemoryBudget&) {
  const VoiceEntry& voice = *batch.voice;
  const Sambert& model = models_of(voice).voice->acoustic();
  const size_t n = batch.items.size();
  std::vector<Utterance*> utterances;
  std::vector<const SambertTokens*> tokens;
  for (const auto& stream : batch.items) {
    utterances.push_back(work_of(*stream).next_to_encode());
    tokens.push_back(&utterances.back()->tokens);
  }
  const int64_t padded = padded_tokens(model, longest_tokens(batch, n));
  const std::vector<SambertEncoding> encodings =
      run_encode(runtime_.backend(), runtime_.allocator(), model, tokens, padded,
                 plan(voice, static_cast<int64_t>(n), padded));
  scheduler::StepOutput out;
  out.audio.resize(n);
  out.errors.resize(n);
  for (size_t i = 0; i < n; ++i) {
    Utterance& u = *utterances[i];
    try {
      u.alignment = model.align(encodings[i].log_durations, limits_);
    } catch (const InputTooLongError& e) {
      out.errors[i] = std::make_exception_ptr(scheduler::StepRefusalError(
          {.request_too_large = true, .code = "sentence_too_long", .message = e.what()}));
      continue;
    }
    if (u.alignment.frames == 0) continue;
    try {
      u.memory = model.memory(u.tokens, encodings[i], u.alignment);
      u.stage = Stage::kEncoded;
    } catch (const InputError&) {
      out.errors[i] = std::current_exception();
    }
  }
  // An utterance whose every token got 0 frames makes no audio: it leaves its stream, as
  // FastSpeech2's sentences without frames do.
  for (size_t i = 0; i < n; ++i) {
    if (out.errors[i] || utterances[i]->alignment.frames > 0) continue;
    std::deque<Utterance>& queue = work_of(*batch.items[i]).utterances;
    queue.erase(std::find_if(queue.begin(), queue.end(),
                             [&](const Utterance& u) { return &u == utterances[i]; }));
  }
  return out;
}

void EncodeKind::warm_up(VoiceEntry& voice, const scheduler::Pacing&,
                         scheduler::MemoryBudget& budget) {
  const Sambert& model = models_of(voice).voice->acoustic();
  SambertTokens tokens;
  tokens.linguistic.assign(8, {0, 0, 0, 0});
  tokens.emotion.assign(8, 0);
  tokens.speaker.assign(8, 0);
  const int64_t padded = padded_tokens(model, 8);
  const ArenaLayout& layout = plan(voice, 1, padded);
  if (budget.fits(scheduler::MemoryBudget::footprint(layout.bytes()))) {
    (void)run_encode(runtime_.backend(), runtime_.allocator(), model, {&tokens}, padded, layout);
  }
}

// ---- PrefillKind ---------------------------------------------------------------------------

namespace {

// Whether `stream`'s next utterance is encoded and waits for a prefill. A stream holding all the
// frames it may hold waits for its client first: it would not decode them yet, and one that does
// not read must not take pages to decode on (DecodeKind decodes held utterances to their end
// while others wait for pages).
bool wants_prefill(const Stream& stream) {
  const SentenceWork& work = work_of(stream);
  return stream.running() && !work.utterances.empty() &&
         work.utterances.front().stage == Stage::kEncoded && work.held_frames() < work.decode_ahead;
}

// A prefill of `lead`'s voice from `candidates` (least slack first): the utterances whose pages
// are free (batch_within_free_pages).
Batch prefill_batch_led_by(const std::vector<Candidate>& candidates, const Candidate& lead,
                           const scheduler::Pacing& pacing, scheduler::Clock::time_point now) {
  VoiceEntry* voice = lead.stream->voice;
  const KvPagePool* pool = voice->models ? models_of(*voice).pages.get() : nullptr;
  const auto need = [](const Candidate& c) { return pages_needed(front(*c.stream)); };
  return scheduler::batch_within_free_pages(
      candidates, lead, pool, pool != nullptr ? pool->free_pages() : 0, pacing, now, need,
      [&](const Candidate& c) { return need(c) > pool->pages(); });
}

}  // namespace

Batch PrefillKind::propose(const std::vector<std::shared_ptr<Stream>>& streams,
                           const scheduler::Pacing& pacing, scheduler::Clock::time_point now) {
  std::vector<Candidate> candidates;
  for (const std::shared_ptr<Stream>& stream : streams) {
    if (!wants_prefill(*stream)) continue;
    // The utterance this prefill is for is the audio the stream waits for, not audio on its way.
    candidates.push_back(
        {stream, stream->slack(now, pacing.first_audio_due_s) + prefilled_audio_s(*stream)});
  }
  (void)scheduler::lead_by_slack(candidates, pacing, now);  // orders them
  // Each voice has a pool of its own: when the most urgent utterance of one voice waits for
  // pages, the next voice's may still go.
  std::set<const VoiceEntry*> tried;
  for (const Candidate& lead : candidates) {
    if (!tried.insert(lead.stream->voice).second) continue;
    Batch batch = prefill_batch_led_by(candidates, lead, pacing, now);
    if (!batch.items.empty()) return batch;
  }
  return {};
}

const ArenaLayout& PrefillKind::plan(VoiceEntry& voice, int64_t batch, int64_t padded) {
  return plans_.get(std::make_tuple(&voice, batch, padded), [&] {
    LoadedModels& models = models_of(voice);
    return plan_prefill(runtime_.backend(), models.voice->acoustic(), models.cache, batch, padded);
  });
}

uint64_t PrefillKind::footprint(const Batch& batch, size_t size) {
  return scheduler::MemoryBudget::footprint(plan(*batch.voice, static_cast<int64_t>(size),
                                                 round_up(longest_steps(batch, size), kKvPageSize))
                                                .bytes());
}

scheduler::StepRefusal PrefillKind::too_big(const Batch& batch, uint64_t footprint,
                                            uint64_t available) const {
  return {.request_too_large = true,
          .code = "sentence_too_long",
          .message = "an utterance of " + std::to_string(front(*batch.items[0]).alignment.frames) +
                     " frames needs " + format_bytes(footprint) +
                     " of device memory for the Sambert decoder's memory, more than the " +
                     format_bytes(available) +
                     " this server has for one step; split it into shorter utterances"};
}

scheduler::StepOutput PrefillKind::run(const Batch& batch, scheduler::MemoryBudget&) {
  VoiceEntry& voice = *batch.voice;
  LoadedModels& models = models_of(voice);
  KvPagePool& pool = *models.pages;
  const Sambert& model = models.voice->acoustic();
  const size_t n = batch.items.size();
  scheduler::StepOutput out;
  out.audio.resize(n);
  out.errors.resize(n);
  std::vector<size_t> taken;
  std::vector<const SambertMemory*> memories;
  std::vector<const std::vector<int64_t>*> pages;
  for (size_t i = 0; i < n; ++i) {
    SentenceWork& work = work_of(*batch.items[i]);
    Utterance& u = work.utterances.front();
    if (pages_needed(u) > pool.pages()) {
      out.errors[i] = std::make_exception_ptr(scheduler::StepRefusalError(
          {.request_too_large = true,
           .code = "sentence_too_long",
           .message = "an utterance of " + std::to_string(u.alignment.frames) + " frames takes " +
                      std::to_string(u.alignment.steps) +
                      " decoder steps, whose keys and values "
                      "need " +
                      std::to_string(pages_needed(u)) + " pages of the KV cache, which has " +
                      std::to_string(pool.pages()) +
                      "; split it into shorter utterances or give the server a larger "
                      "--kv-cache"}));
      continue;
    }
    // Pages taken since propose() (a smaller batch ran first): it waits.
    if (pool.free_pages() < pages_needed(u)) continue;
    work.pool = &pool;
    VOXD_CHECK(
        pool.grow(u.memory_pages, u.alignment.steps) && pool.grow(u.step_pages, u.alignment.steps),
        "the KV pool had the pages it counted");
    taken.push_back(i);
    memories.push_back(&u.memory);
    pages.push_back(&u.memory_pages);
  }
  if (taken.empty()) return out;
  int64_t longest = 0;
  for (size_t i : taken) longest = std::max(longest, front(*batch.items[i]).alignment.steps);
  const int64_t padded = round_up(longest, kKvPageSize);
  const Tensor inputs =
      run_prefill(runtime_.backend(), runtime_.allocator(), model, models.cache, memories, pages,
                  padded, plan(voice, static_cast<int64_t>(taken.size()), padded));
  const int64_t d_units = model.config().decoder_units;
  for (size_t k = 0; k < taken.size(); ++k) {
    SentenceWork& work = work_of(*batch.items[taken[k]]);
    Utterance& u = work.utterances.front();
    const float* row = inputs.data<float>() + static_cast<int64_t>(k) * padded * d_units;
    u.memory_input.assign(row, row + u.alignment.steps * d_units);
    u.memory = {};
    u.stage = Stage::kDecoding;
    u.previous_frame.assign(static_cast<size_t>(model.config().num_mels), 0.0f);
    UtteranceAudio audio;
    audio.frames = u.alignment.frames;
    audio.first_chunk = work.prefilled == 0 ? first_chunk_frames_ : chunk_frames_;
    if (const VoiceConfig& config = config_of(voice); config.acoustic.nsf) {
      audio.source = nsf_source(config, work.seed, work.prefilled);
      audio.excitation.resize(static_cast<size_t>(config.vocoder.nsf->harmonics + 1));
    }
    work.audio.push_back(std::move(audio));
    ++work.prefilled;
  }
  return out;
}

void PrefillKind::warm_up(VoiceEntry& voice, const scheduler::Pacing&,
                          scheduler::MemoryBudget& budget) {
  LoadedModels& models = models_of(voice);
  const Sambert& model = models.voice->acoustic();
  const ArenaLayout& prefill = plan(voice, 1, kKvPageSize);
  const ArenaLayout decode = plan_decode(runtime_.backend(), model, models.cache, 1, 1, 1);
  if (!budget.fits(scheduler::MemoryBudget::footprint(std::max(prefill.bytes(), decode.bytes())))) {
    return;
  }
  std::vector<int64_t> memory_pages, step_pages;
  if (!models.pages->grow(memory_pages, kKvPageSize)) return;
  if (!models.pages->grow(step_pages, kKvPageSize)) {
    models.pages->release(memory_pages);
    return;
  }
  // The pages go back however the made-up steps end (a warm-up failure is logged and ignored).
  const auto give_back = [&] {
    models.pages->release(memory_pages);
    models.pages->release(step_pages);
  };
  try {
    warm_up_steps(models, memory_pages, step_pages, prefill, decode);
  } catch (...) {
    give_back();
    throw;
  }
  give_back();
}

void PrefillKind::warm_up_steps(LoadedModels& models, const std::vector<int64_t>& memory_pages,
                                const std::vector<int64_t>& step_pages, const ArenaLayout& prefill,
                                const ArenaLayout& decode) {
  const Sambert& model = models.voice->acoustic();
  const SambertConfig& c = model.config();
  SambertMemory memory;
  memory.text = Tensor::zeros({kKvPageSize, c.outputs_per_step * c.projection_units}, DType::F32);
  memory.speaker.assign(static_cast<size_t>(kKvPageSize), 0);
  memory.emotion.assign(static_cast<size_t>(kKvPageSize), 0);
  (void)run_prefill(runtime_.backend(), runtime_.allocator(), model, models.cache, {&memory},
                    {&memory_pages}, kKvPageSize, prefill);
  SambertStepInputs inputs;
  inputs.previous_frame = Tensor::zeros({1, 1, c.num_mels}, DType::F32);
  inputs.memory_input = Tensor::zeros({1, 1, c.decoder_units}, DType::F32);
  inputs.step_table = page_table({&step_pages}, 1);
  inputs.steps = Tensor::from_vector({1}, std::vector<int64_t>{0});
  inputs.step_starts = inputs.steps;
  inputs.memory_table = page_table({&memory_pages}, 1);
  inputs.memory_ends = Tensor::from_vector({1}, std::vector<int64_t>{1});
  (void)run_decode(runtime_.backend(), runtime_.allocator(), model, models.cache, inputs, decode);
}

// ---- DecodeKind ----------------------------------------------------------------------------

namespace {

// The voices an utterance that wants its prefill waits for pages of (pages its pool has, but not
// free now).
std::set<const VoiceEntry*> voices_short_of_pages(
    const std::vector<std::shared_ptr<Stream>>& streams) {
  std::set<const VoiceEntry*> short_of_pages;
  for (const std::shared_ptr<Stream>& stream : streams) {
    if (!wants_prefill(*stream) || !stream->voice->models) continue;
    const KvPagePool& pool = *models_of(*stream->voice).pages;
    const int64_t needed = pages_needed(work_of(*stream).utterances.front());
    if (needed > pool.free_pages() && needed <= pool.pages()) short_of_pages.insert(stream->voice);
  }
  return short_of_pages;
}

}  // namespace

Batch DecodeKind::propose(const std::vector<std::shared_ptr<Stream>>& streams,
                          const scheduler::Pacing& pacing, scheduler::Clock::time_point now) {
  // While an utterance waits for its voice's pages, the voice's decoding utterances go on to
  // their last step even for clients that read slowly (what they make waits for them as frames
  // on the host), so that every page comes back: no client can hold the pool by not reading.
  const std::set<const VoiceEntry*> short_of_pages = voices_short_of_pages(streams);
  std::vector<Candidate> candidates;
  for (const std::shared_ptr<Stream>& stream : streams) {
    if (!stream->running() ||
        work_of(*stream).decoding(short_of_pages.contains(stream->voice)) == nullptr) {
      continue;
    }
    // Decoded frames not vocoded yet are audio on its way.
    candidates.push_back({stream, stream->slack(now, pacing.first_audio_due_s) +
                                      seconds_of(*stream->voice, work_of(*stream).held_frames())});
  }
  Batch batch = scheduler::lead_by_slack(candidates, pacing, now);
  for (const Candidate& c : candidates) {
    if (static_cast<int64_t>(batch.items.size()) >= pacing.max_batch) break;
    if (c.stream->voice == batch.voice) batch.items.push_back(c.stream);
  }
  return batch;
}

const ArenaLayout& DecodeKind::plan(VoiceEntry& voice, int64_t batch, int64_t step_width,
                                    int64_t memory_width) {
  return plans_.get(std::make_tuple(&voice, batch, step_width, memory_width), [&] {
    LoadedModels& models = models_of(voice);
    return plan_decode(runtime_.backend(), models.voice->acoustic(), models.cache, batch,
                       step_width, memory_width);
  });
}

namespace {

// The page tables' widths of a decode step over the batch's first `size` utterances.
std::pair<int64_t, int64_t> table_widths(const Batch& batch, size_t size) {
  int64_t steps = 1;
  int64_t memory = 1;
  for (size_t i = 0; i < size; ++i) {
    const Utterance& u = front(*batch.items[i]);
    steps = std::max(steps, static_cast<int64_t>(u.step_pages.size()));
    memory = std::max(memory, static_cast<int64_t>(u.memory_pages.size()));
  }
  return {next_power_of_two(steps), next_power_of_two(memory)};
}

}  // namespace

uint64_t DecodeKind::footprint(const Batch& batch, size_t size) {
  const auto [steps, memory] = table_widths(batch, size);
  return scheduler::MemoryBudget::footprint(
      plan(*batch.voice, static_cast<int64_t>(size), steps, memory).bytes());
}

scheduler::StepRefusal DecodeKind::too_big(const Batch&, uint64_t footprint,
                                           uint64_t available) const {
  return {.request_too_large = false,
          .code = "insufficient_memory",
          .message = "one Sambert decoder step needs " + format_bytes(footprint) +
                     " of device memory, more than the " + format_bytes(available) +
                     " this server has for one step; start it with more memory"};
}

scheduler::StepOutput DecodeKind::run(const Batch& batch, scheduler::MemoryBudget&) {
  VoiceEntry& voice = *batch.voice;
  LoadedModels& models = models_of(voice);
  const Sambert& model = models.voice->acoustic();
  const SambertConfig& c = model.config();
  const auto b = static_cast<int64_t>(batch.items.size());
  const auto [step_width, memory_width] = table_widths(batch, batch.items.size());
  std::vector<float> previous;
  std::vector<float> memory_input;
  std::vector<const std::vector<int64_t>*> step_pages;
  std::vector<const std::vector<int64_t>*> memory_pages;
  std::vector<int64_t> steps, starts, ends;
  for (const auto& stream : batch.items) {
    const Utterance& u = front(*stream);
    previous.insert(previous.end(), u.previous_frame.begin(), u.previous_frame.end());
    const auto row = u.memory_input.begin() + u.step * c.decoder_units;
    memory_input.insert(memory_input.end(), row, row + c.decoder_units);
    step_pages.push_back(&u.step_pages);
    memory_pages.push_back(&u.memory_pages);
    const int64_t band = u.alignment.band_width;
    steps.push_back(u.step);
    starts.push_back(std::max<int64_t>(0, u.step - band));
    ends.push_back(std::min(u.step + band, u.alignment.steps - 1));
  }
  SambertStepInputs inputs;
  inputs.previous_frame = Tensor::from_vector({b, 1, c.num_mels}, previous);
  inputs.memory_input = Tensor::from_vector({b, 1, c.decoder_units}, memory_input);
  inputs.step_table = page_table(step_pages, step_width);
  inputs.steps = Tensor::from_vector({b}, steps);
  inputs.step_starts = Tensor::from_vector({b}, starts);
  inputs.memory_table = page_table(memory_pages, memory_width);
  inputs.memory_ends = Tensor::from_vector({b}, ends);
  const std::vector<float> frames =
      run_decode(runtime_.backend(), runtime_.allocator(), model, models.cache, inputs,
                 plan(voice, b, step_width, memory_width));

  const int64_t r = c.outputs_per_step;
  const int64_t mels = c.num_mels;
  for (int64_t i = 0; i < b; ++i) {
    SentenceWork& work = work_of(*batch.items[static_cast<size_t>(i)]);
    Utterance& u = work.utterances.front();
    UtteranceAudio& audio = work.audio.back();
    const float* made = frames.data() + i * r * mels;
    // The last step's frames past T pad it to r; only its last frame (the next step's input)
    // is read.
    const int64_t kept = std::min(r, audio.frames - audio.decoded);
    audio.decoder_mel.insert(audio.decoder_mel.end(), made, made + kept * mels);
    audio.decoded += kept;
    u.previous_frame.assign(made + (r - 1) * mels, made + r * mels);
    if (++u.step == u.alignment.steps) {
      work.release_pages();
      work.utterances.pop_front();
    }
  }
  return scheduler::StepOutput{.audio = std::vector<std::vector<float>>(static_cast<size_t>(b)),
                               .errors = std::vector<std::exception_ptr>(static_cast<size_t>(b)),
                               .preempted = 0};
}

}  // namespace voxd::sambert
