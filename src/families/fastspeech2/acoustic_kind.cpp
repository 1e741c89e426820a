#include "families/fastspeech2/acoustic_kind.h"

#include <algorithm>
#include <string>

#include "core/memory_summary.h"
#include "core/ops.h"
#include "families/fastspeech2/family.h"
#include "server/logging.h"

namespace voxd::fastspeech2 {
namespace {

struct Candidate {
  std::shared_ptr<Stream> stream;
  double slack;
};

int64_t phonemes_of(const Stream& stream) {
  return static_cast<int64_t>(work_of(stream).sentences.front().ids.size());
}

// The speaking rate of the stream's next sentence: the request's speed times the sentence's own.
float rate_of(const Stream& stream) {
  const SentenceWork& work = work_of(stream);
  return work.speed * work.sentences.front().rate;
}

// The longest next sentence of the batch's first `size` items.
int64_t longest(const Batch& batch, size_t size) {
  int64_t phonemes = 0;
  for (size_t i = 0; i < size; ++i) phonemes = std::max(phonemes, phonemes_of(*batch.items[i]));
  return phonemes;
}

// The longest mel of sequences [first, first + count) of `encoding`.
int64_t longest_mel(const AcousticEncoding& encoding, size_t first, size_t count) {
  const auto begin = encoding.mel_lengths.begin() + static_cast<std::ptrdiff_t>(first);
  return *std::max_element(begin, begin + static_cast<std::ptrdiff_t>(count));
}

// `sentences` made-up sentences of `symbols` ids each, for the warm-up.
std::vector<std::vector<int64_t>> made_up_sentences(const FastSpeech2& model, int64_t sentences,
                                                    int64_t symbols) {
  return std::vector<std::vector<int64_t>>(
      static_cast<size_t>(sentences),
      std::vector<int64_t>(static_cast<size_t>(symbols),
                           std::min<int64_t>(1, model.n_symbols() - 1)));
}

// What graphs may record: what the budget admits now.
AcousticGraphs::Admission admission(MemoryBudget& budget) {
  return [&budget](uint64_t bytes) { return budget.fits(MemoryBudget::footprint(bytes)); };
}

}  // namespace

std::vector<std::pair<int64_t, int64_t>> warm_ladder(int64_t max_batch) {
  std::vector<std::pair<int64_t, int64_t>> steps;
  for (int64_t batch = 1; batch < max_batch; batch *= 2) steps.emplace_back(batch, 16);
  for (int64_t phonemes = 16; phonemes <= 256; phonemes *= 2) {
    steps.emplace_back(max_batch, phonemes);
  }
  return steps;
}

AcousticKind::AcousticKind(DeviceRuntime& runtime, const scheduler::SchedulerOptions& options)
    : runtime_(runtime),
      lane_(options.overlap_steps ? 1 : 0),
      chunk_frames_(options.chunk_frames),
      first_chunk_frames_(options.first_chunk_frames),
      graph_bytes_(options.cuda_graphs ? options.acoustic_graph_bytes : 0),
      length_band_(options.acoustic_length_band) {
  VOXD_CHECK(length_band_ >= 1.0, "an acoustic length band below 1");
}

Batch AcousticKind::propose(const std::vector<std::shared_ptr<Stream>>& streams,
                            const Pacing& pacing, Clock::time_point now) {
  std::vector<Candidate> candidates;
  for (const std::shared_ptr<Stream>& stream : streams) {
    const SentenceWork& work = work_of(*stream);
    if (!stream->running() || work.sentences.empty()) continue;
    const int64_t held = work.held_mel_frames();
    if (held > work.lookahead_frames) continue;
    // The mel a stream holds is audio on its way: its next sentence is needed that much later.
    const double held_s = static_cast<double>(held * config_of(*stream->voice).hop_length) /
                          static_cast<double>(stream->sample_rate);
    candidates.push_back({stream, stream->slack(now, pacing.first_audio_due_s) + held_s});
  }
  Batch batch = scheduler::lead_by_slack(candidates, pacing, now);
  if (candidates.empty()) return batch;
  const Stream& lead = *candidates.front().stream;
  const auto phonemes = static_cast<double>(phonemes_of(lead));
  for (const Candidate& c : candidates) {
    if (static_cast<int64_t>(batch.items.size()) >= pacing.max_batch) break;
    const auto length = static_cast<double>(phonemes_of(*c.stream));
    if (c.stream->voice == lead.voice && rate_of(*c.stream) == rate_of(lead) &&
        length <= phonemes * length_band_ && length * length_band_ >= phonemes) {
      batch.items.push_back(c.stream);
    }
  }
  return batch;
}

const AcousticEncoderPlan& AcousticKind::encoder_plan(const VoiceEntry& voice, int64_t batch,
                                                      int64_t phonemes) {
  return encoder_plans_.get(std::make_tuple(&voice, batch, phonemes), [&] {
    const Clock::time_point started = Clock::now();
    AcousticEncoderPlan made = plan_acoustic_encoder(
        runtime_.backend(lane_), models_of(voice).voice->acoustic(), batch, phonemes,
        /*mask_padding=*/true);
    planning_s_ += std::chrono::duration<double>(Clock::now() - started).count();
    return made;
  });
}

const ArenaLayout& AcousticKind::decoder_plan(const VoiceEntry& voice, int64_t batch,
                                              int64_t phonemes, int64_t frames) {
  return decoder_plans_.get(std::make_tuple(&voice, batch, phonemes, frames), [&] {
    const Clock::time_point started = Clock::now();
    ArenaLayout made =
        plan_acoustic_decoder(runtime_.backend(lane_), models_of(voice).voice->acoustic(), batch,
                              phonemes, frames, /*mask_padding=*/true);
    planning_s_ += std::chrono::duration<double>(Clock::now() - started).count();
    return made;
  });
}

AcousticGraphs* AcousticKind::graphs_for(VoiceEntry& voice, size_t sentences) {
  if (graph_bytes_ == 0 || static_cast<int64_t>(sentences) > kGraphSentences ||
      !runtime_.backend(lane_).can_capture()) {
    return nullptr;
  }
  LoadedModels& models = models_of(voice);
  if (!models.acoustic_graphs) {
    models.acoustic_graphs = std::make_unique<AcousticGraphs>(
        runtime_.persistent_context(lane_), models.voice->acoustic(), graph_bytes_);
  }
  return models.acoustic_graphs.get();
}

uint64_t AcousticKind::footprint(const Batch& batch, size_t size) {
  const int64_t phonemes = longest(batch, size);
  // A recorded encoder replays in its own arena, where its hidden states stay for the decoder.
  if (const AcousticGraphs* graphs = graphs_for(*batch.voice, size);
      graphs != nullptr && graphs->recorded(static_cast<int64_t>(size), phonemes, {})) {
    return 0;
  }
  // The decoder's plan is checked once the frames are known.
  const AcousticEncoderPlan& p =
      encoder_plan(*batch.voice, static_cast<int64_t>(size), padded_length(phonemes));
  return MemoryBudget::footprint(p.encoder.bytes(), p.hidden_bytes);
}

StepRefusal AcousticKind::too_big(const Batch& batch, uint64_t footprint,
                                  uint64_t available) const {
  return {.request_too_large = true,
          .code = "sentence_too_long",
          .message = "a sentence of " + std::to_string(longest(batch, 1)) + " phonemes needs " +
                     format_bytes(footprint) +
                     " of device memory for the acoustic model, more than the " +
                     format_bytes(available) +
                     " this server has for one step; split it into shorter sentences"};
}

StepOutput AcousticKind::run(const Batch& batch, MemoryBudget& budget) {
  VoiceEntry& entry = *batch.voice;
  const size_t n = batch.items.size();
  std::vector<std::vector<int64_t>> ids;
  ids.reserve(n);
  for (const auto& stream : batch.items) ids.push_back(work_of(*stream).sentences.front().ids);
  SynthesisControls controls;
  controls.duration_scale = 1.0f / rate_of(*batch.items.front());
  // Sentences of several lengths share the step: padding must not change anyone's audio.
  controls.mask_padding = true;

  StepOutput out;
  out.audio.resize(n);
  out.errors.resize(n);
  const Clock::time_point started = Clock::now();
  Clock::time_point encoded;
  int64_t frames = 0;
  bool recorded_decoder = false;
  AcousticGraphs* graphs = graphs_for(entry, n);
  std::optional<AcousticEncoding> recorded =
      graphs != nullptr ? graphs->encode(ids, {}, controls, admission(budget)) : std::nullopt;
  if (recorded) {
    encoded = Clock::now();
    frames = longest_mel(*recorded, 0, n);
    controls.pad_to_phonemes = recorded->hidden.size(1);
    recorded_decoder = decode_recorded(*graphs, batch, *recorded, controls, budget, out);
  } else {
    controls.pad_to_phonemes = padded_length(longest(batch, n));
    const AcousticEncoderPlan& encoder =
        encoder_plan(entry, static_cast<int64_t>(n), controls.pad_to_phonemes);
    const AcousticEncoding encoding = run_acoustic_encoder_step(
        runtime_.backend(lane_), runtime_.allocator(), models_of(entry).voice->acoustic(), ids, {},
        controls, encoder.encoder);
    encoded = Clock::now();
    frames = longest_mel(encoding, 0, n);
    decode(batch, encoding, controls, 0, n, encoder.hidden_bytes, /*in_graph=*/false, budget, out);
  }
  if (spdlog::should_log(spdlog::level::debug)) {
    server::log_event(spdlog::level::debug, "acoustic step",
                      {{"sentences", n},
                       {"phonemes", longest(batch, n)},
                       {"padded_phonemes", controls.pad_to_phonemes},
                       {"frames", frames},
                       {"padded_frames", frames > 0 ? padded_length(frames) : 0},
                       {"recorded_encoder", recorded.has_value()},
                       {"recorded_decoder", recorded_decoder},
                       {"planning_s", planning_s_},
                       {"encoder_s", std::chrono::duration<double>(encoded - started).count()},
                       {"decoder_s", std::chrono::duration<double>(Clock::now() - encoded).count()},
                       {"decoder_run_s", decoder_run_s_}});
  }
  planning_s_ = 0;
  decoder_run_s_ = 0;
  for (const auto& stream : batch.items) work_of(*stream).sentences.pop_front();
  return out;
}

bool AcousticKind::decode_recorded(AcousticGraphs& graphs, const Batch& batch,
                                   AcousticEncoding& encoding, const SynthesisControls& controls,
                                   MemoryBudget& budget, StepOutput& out) {
  const Clock::time_point started = Clock::now();
  const std::optional<AcousticOutput> decoded =
      graphs.decode(encoding, controls, admission(budget));
  if (!decoded) {
    // The eager decoder reads the encoder graph's hidden states in place when it fits beside the
    // graphs. When it does not, it reads a copy (where the copy fits), which lets the graphs go
    // to make room: the copy replaces them in `encoding`, as no tensor may outlive its arena.
    const size_t n = batch.items.size();
    const int64_t longest_frames = longest_mel(encoding, 0, n);
    const uint64_t hidden_bytes = encoding.hidden.nbytes();
    const bool fits_in_place =
        longest_frames == 0 ||
        budget.fits(MemoryBudget::footprint(decoder_plan(*batch.voice, static_cast<int64_t>(n),
                                                         encoding.hidden.size(1),
                                                         padded_length(longest_frames))
                                                .bytes()));
    if (!fits_in_place && budget.fits(MemoryBudget::footprint(hidden_bytes))) {
      encoding.hidden =
          ops::to_device(runtime_.context(lane_), encoding.hidden, encoding.hidden.dtype());
      decode(batch, encoding, controls, 0, n, hidden_bytes, /*in_graph=*/false, budget, out);
    } else {
      decode(batch, encoding, controls, 0, n, 0, /*in_graph=*/true, budget, out);
    }
    return false;
  }
  // Downloaded as it is, converted on the host: no device memory outside the graph's arena.
  const Tensor mel = ops::to_host(runtime_.context(lane_), decoded->mel, decoded->mel.dtype())
                         .to_host_contiguous(DType::F32);
  decoder_run_s_ += std::chrono::duration<double>(Clock::now() - started).count();
  to_chunkers(batch, encoding, mel, 0, batch.items.size());
  return true;
}

void AcousticKind::warm_up(VoiceEntry& voice, const Pacing&, MemoryBudget& budget) {
  warmed_.erase(&voice);  // a voice loaded again climbs the ladder again
  // A step as run() takes it, for a made-up stream of one 16-symbol sentence.
  auto stream = std::make_shared<Stream>();
  stream->voice = &voice;
  stream->sample_rate = voice.card().sample_rate;
  auto work = std::make_unique<SentenceWork>(1.0f, 0);
  work->sentences.push_back({made_up_sentences(models_of(voice).voice->acoustic(), 1, 16).front()});
  stream->work = std::move(work);
  Batch batch;
  batch.voice = &voice;
  batch.items = {stream};
  if (budget.fits(footprint(batch, 1))) (void)run(batch, budget);
}

bool AcousticKind::warm_further(VoiceEntry& voice, const Pacing& pacing, MemoryBudget& budget) {
  const std::vector<std::pair<int64_t, int64_t>> ladder = warm_ladder(pacing.max_batch);
  size_t& next = warmed_[&voice];
  if (next >= ladder.size()) return false;
  const auto [batch, phonemes] = ladder[next++];
  const FastSpeech2& model = models_of(voice).voice->acoustic();
  SynthesisControls controls;
  controls.mask_padding = true;
  controls.pad_to_phonemes = padded_length(phonemes);
  const AcousticEncoderPlan& encoder = encoder_plan(voice, batch, controls.pad_to_phonemes);
  const int64_t frames = phonemes * kWarmFramesPerPhoneme;
  controls.pad_to_frames = padded_length(frames);
  const ArenaLayout& decoder =
      decoder_plan(voice, batch, controls.pad_to_phonemes, controls.pad_to_frames);
  if (!budget.fits(MemoryBudget::footprint(encoder.encoder.bytes(), encoder.hidden_bytes)) ||
      !budget.fits(MemoryBudget::footprint(decoder.bytes(), encoder.hidden_bytes))) {
    return next < ladder.size();
  }
  AcousticEncoding encoding = run_acoustic_encoder_step(
      runtime_.backend(lane_), runtime_.allocator(), model,
      made_up_sentences(model, batch, phonemes), {}, controls, encoder.encoder);
  // Whatever durations it predicted, the decoder runs on kWarmFramesPerPhoneme a symbol.
  std::vector<int64_t> durations(static_cast<size_t>(encoding.hidden.size(1)), 0);
  std::fill_n(durations.begin(), phonemes, kWarmFramesPerPhoneme);
  encoding.durations.assign(static_cast<size_t>(batch), durations);
  encoding.mel_lengths.assign(static_cast<size_t>(batch), frames);
  (void)run_acoustic_decoder_step(runtime_.backend(lane_), runtime_.allocator(), model, encoding,
                                  controls, decoder);
  return next < ladder.size();
}

void AcousticKind::decode(const Batch& batch, const AcousticEncoding& encoding,
                          SynthesisControls controls, size_t first, size_t count, uint64_t carried,
                          bool in_graph, MemoryBudget& budget, StepOutput& out) {
  const VoiceEntry& entry = *batch.voice;
  const int64_t longest_frames = longest_mel(encoding, first, count);
  // Nothing to say: the sentences make no audio, as in Synthesizer.
  if (longest_frames == 0) return;
  const int64_t frames = padded_length(longest_frames);
  controls.pad_to_frames = frames;
  const int64_t phonemes = encoding.hidden.size(1);
  const ArenaLayout& decoder = decoder_plan(entry, static_cast<int64_t>(count), phonemes, frames);
  const uint64_t bytes = decoder.bytes();
  bool fits = budget.fits(MemoryBudget::footprint(bytes));
  if (!fits && count > 1) {
    for (size_t i = first; i < first + count; ++i) {
      decode(batch, encoding, controls, i, 1, carried, in_graph, budget, out);
    }
    return;
  }
  // The last resort: memory held only for speed, unless this step reads it.
  if (!fits && !in_graph && budget.reclaim(MemoryBudget::footprint(bytes))) {
    fits = budget.fits(MemoryBudget::footprint(bytes));
  }
  if (!fits) {
    out.errors[first] = std::make_exception_ptr(scheduler::StepRefusalError(budget.refusal(
        {.request_too_large = true,
         .code = "sentence_too_long",
         .message = "a sentence of " + std::to_string(encoding.src_lengths[first]) +
                    " phonemes and " + std::to_string(longest_frames) + " mel frames needs " +
                    format_bytes(MemoryBudget::footprint(bytes, carried)) +
                    " of device memory for the acoustic decoder, more than the " +
                    format_bytes(budget.available() + MemoryBudget::footprint(0, carried)) +
                    " this server has for one step; split it into shorter sentences"},
        MemoryBudget::footprint(bytes))));
    return;
  }
  const Clock::time_point started = Clock::now();
  const AcousticOutput decoded = run_acoustic_decoder_step(
      runtime_.backend(lane_), runtime_.allocator(), models_of(entry).voice->acoustic(),
      select_sequences(encoding, first, count), controls, decoder);
  decoder_run_s_ += std::chrono::duration<double>(Clock::now() - started).count();
  to_chunkers(batch, encoding, decoded.mel, first, count);
}

void AcousticKind::to_chunkers(const Batch& batch, const AcousticEncoding& encoding,
                               const Tensor& mel, size_t first, size_t count) {
  const VoiceEntry& entry = *batch.voice;
  for (size_t i = 0; i < count; ++i) {
    const int64_t own_frames = encoding.mel_lengths[first + i];
    if (own_frames == 0) continue;
    // [T_mel, n_mels] of this sequence → [n_mels, frames], a strided view the chunker keeps:
    // the step's mel stays until each of its sequences' chunkers is done (its sentences are
    // within the length band, so little of it is padding), and nothing writes it.
    const Tensor sequence =
        mel.select(0, static_cast<int64_t>(i)).narrow(0, 0, own_frames).transpose(0, 1);
    Stream& stream = *batch.items[first + i];
    SentenceWork& work = work_of(stream);
    const bool first_sentence =
        stream.produced_samples == 0 && work.chunkers.empty() && work.ready.empty();
    VocoderChunker chunker(config_of(entry).vocoder, chunk_frames_,
                           first_sentence ? first_chunk_frames_ : chunk_frames_);
    chunker.append_shared(sequence);
    chunker.finish(work.sentences.front().pause_samples);
    work.largest_sentence_frames = std::max(work.largest_sentence_frames, own_frames);
    work.chunkers.push_back(std::move(chunker));
  }
}

}  // namespace voxd::fastspeech2
