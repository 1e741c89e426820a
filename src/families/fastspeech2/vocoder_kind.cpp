#include "families/fastspeech2/vocoder_kind.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <string>

#include "core/memory_summary.h"
#include "families/fastspeech2/family.h"
#include "families/fastspeech2/workspace_steps.h"

namespace voxd::fastspeech2 {
namespace {

struct Candidate {
  std::shared_ptr<Stream> stream;
  double slack;
  int64_t room;      // samples the stream's buffer still takes
  size_t taken = 0;  // its chunks in the batch so far
};

// Warm-up records graphs for batches of powers of two and max_batch's (a batch in between is
// padded with zero chunks); all of a voice's graphs share one arena (SharedGraphMemory), so more
// sizes take no more memory.
int64_t power_of_two_batch(int64_t chunks) {
  int64_t padded = 1;
  while (padded < chunks) padded *= 2;
  return padded;
}

// Sizes between the powers of two above 8, four an octave (10, 12, 14, 16, 20, ...: a step pads
// at most about a fifth of its chunks), which warm_further records while the device is idle: a
// burst's steps of 33-63 first chunks padded to 64 spent up to nearly half of the GPU's time on
// zeros (bench/NOTES.md, session 39).
int64_t fine_batch(int64_t chunks) {
  if (chunks <= 8) return power_of_two_batch(chunks);
  const int64_t step = power_of_two_batch(chunks) / 8;
  return (chunks + step - 1) / step * step;
}

// The position of each item's chunk among its stream's ready chunks: how many earlier items
// are of the same stream.
std::vector<size_t> chunk_indices(const Batch& batch) {
  std::map<const Stream*, size_t> seen;
  std::vector<size_t> indices;
  indices.reserve(batch.items.size());
  for (const auto& stream : batch.items) indices.push_back(seen[stream.get()]++);
  return indices;
}

// Where an item's audio lies in its row of the step's output, read when its chunk is taken.
struct AudioCut {
  int64_t skip_samples;
  int64_t samples;
  int64_t silence_after;
};

// Each item's samples of `audio` [rows, samples] (row i is item i's), and its silence after.
StepOutput cut_audio(const Tensor& audio, const std::vector<AudioCut>& cuts) {
  StepOutput out;
  out.audio.resize(cuts.size());
  out.errors.resize(cuts.size());
  const int64_t out_samples = audio.size(1);
  for (size_t i = 0; i < cuts.size(); ++i) {
    const float* row =
        audio.data<float>() + static_cast<int64_t>(i) * out_samples + cuts[i].skip_samples;
    out.audio[i].assign(row, row + cuts[i].samples);
    out.audio[i].resize(out.audio[i].size() + static_cast<size_t>(cuts[i].silence_after), 0.0f);
  }
  return out;
}

// A step replaying a recorded graph: its audio once the replay is done. `times`, where the step
// counts in the voice's step times, gets the time from the start to the audio on the host.
class ReplayInFlight final : public StepInFlight {
 public:
  ReplayInFlight(VocoderGraphs& graphs, std::vector<AudioCut> cuts, VocoderStepTimes* times,
                 int64_t rows, Clock::time_point started)
      : graphs_(graphs), cuts_(std::move(cuts)), times_(times), rows_(rows), started_(started) {}

  StepOutput finish() override {
    const Tensor audio = graphs_.finish();
    if (times_ != nullptr) {
      times_->record(rows_, graphs_.frames(),
                     std::chrono::duration<double>(Clock::now() - started_).count());
    }
    return cut_audio(audio, cuts_);
  }

 private:
  VocoderGraphs& graphs_;
  std::vector<AudioCut> cuts_;
  VocoderStepTimes* times_;
  int64_t rows_;
  Clock::time_point started_;
};

}  // namespace

Batch VocoderKind::propose(const std::vector<std::shared_ptr<Stream>>& streams,
                           const Pacing& pacing, Clock::time_point now) {
  std::vector<Candidate> candidates;
  for (const std::shared_ptr<Stream>& stream : streams) {
    if (!stream->running()) continue;
    const MelChunk* chunk = work_of(*stream).peek_chunk(0);
    if (chunk == nullptr) continue;
    const int64_t room = stream->max_buffered_samples - stream->buffered_samples;
    if (chunk->samples > room) continue;
    candidates.push_back({stream, stream->slack(now, pacing.first_audio_due_s), room});
  }
  Batch batch = scheduler::lead_by_slack(candidates, pacing, now);
  if (candidates.empty()) return batch;
  const int64_t frames = work_of(*candidates.front().stream).peek_chunk(0)->mel.size(1);
  // A chunk of `frames` joins, and so does a shorter one whose mel does not reach its stream's
  // end: run() pads it on the right with zero frames, which leaves its own samples as they are.
  const auto fits = [frames](const MelChunk& chunk) {
    return chunk.mel.size(1) == frames || (!chunk.reaches_end && chunk.mel.size(1) < frames);
  };
  // Pass k adds each stream's k-th chunk, so the most urgent streams get one chunk each before
  // any gets a second, and every prefix of the batch keeps each stream's chunks in order. On the
  // CPU, beyond the first pass a chunk joins only while the step's expected time stays under the
  // lead's slack, or no longer than the first pass's: a step's time grows with its chunks there,
  // and a step of many chunks per stream would run past the end of the audio that the streams
  // with the least in hand hold. On a GPU a step's time grows far less than its chunks and a
  // burst needs the device's throughput: the bound cost a burst of 1,000 on an H100 0.3-0.5 s at
  // the p95 end (docs/benchmarks.md), so steps fill to max_batch there.
  const bool bounded = runtime_.backend().device().is_cpu();
  const auto expected_seconds = [&](size_t chunks) {
    return expected_step_seconds(*batch.voice, static_cast<int64_t>(chunks), frames);
  };
  double first_pass_seconds = 0.0;
  const auto full = [&](size_t pass) {
    const size_t size = batch.items.size();
    if (static_cast<int64_t>(size) >= pacing.max_batch) return true;
    if (pass == 0 || !bounded) return false;
    return expected_seconds(size + 1) > std::max(batch.slack_s, first_pass_seconds);
  };
  for (size_t pass = 0; !full(pass); ++pass) {
    bool added = false;
    for (Candidate& c : candidates) {
      if (full(pass)) break;
      if (c.taken != pass || c.stream->voice != batch.voice) continue;
      const MelChunk* chunk = work_of(*c.stream).peek_chunk(pass);
      if (chunk == nullptr || !fits(*chunk) || chunk->samples > c.room) continue;
      batch.items.push_back(c.stream);
      c.room -= chunk->samples;
      ++c.taken;
      added = true;
    }
    if (!added) break;
    if (pass == 0) first_pass_seconds = expected_seconds(batch.items.size());
  }
  return batch;
}

double VocoderKind::expected_step_seconds(const VoiceEntry& voice, int64_t chunks,
                                          int64_t frames) const {
  if (!voice.models) return 0.0;
  const int64_t rows = use_graphs(voice, frames) ? graph_rows(voice, frames, chunks) : chunks;
  return models_of(voice).vocoder_times.expected(rows, frames);
}

int64_t VocoderKind::frames_of(const Batch& batch) {
  return work_of(*batch.items.front()).ready.front().mel.size(1);
}

int64_t VocoderKind::interior_frames(const VoiceEntry& voice) const {
  return chunk_frames_ + 2 * config_of(voice).vocoder.receptive_field_frames();
}

int64_t VocoderKind::first_frames(const VoiceEntry& voice) const {
  return first_chunk_frames_ + config_of(voice).vocoder.receptive_field_frames();
}

bool VocoderKind::use_graphs(const VoiceEntry& voice, int64_t frames) const {
  return cuda_graphs_ && runtime_.backend().can_capture() &&
         (frames == interior_frames(voice) || frames == first_frames(voice));
}

int64_t VocoderKind::graph_rows(const VoiceEntry& voice, int64_t frames, int64_t chunks) {
  const auto& graphs = models_of(voice).vocoder_graphs;
  const auto found = graphs.find(frames);
  const int64_t held = found != graphs.end() ? found->second->recorded_holding(chunks) : 0;
  return held > 0 && held <= power_of_two_batch(chunks) ? held : fine_batch(chunks);
}

bool VocoderKind::recorded(const VoiceEntry& voice, int64_t frames, int64_t rows) {
  const auto& graphs = models_of(voice).vocoder_graphs;
  const auto found = graphs.find(frames);
  return found != graphs.end() && found->second->recorded(rows);
}

VocoderGraphs& VocoderKind::graphs_of(VoiceEntry& voice, int64_t frames) {
  LoadedModels& models = models_of(voice);
  std::unique_ptr<VocoderGraphs>& graphs = models.vocoder_graphs[frames];
  if (!graphs) {
    Context& persistent = runtime_.persistent_context();
    if (!models.vocoder_graph_memory) {
      models.vocoder_graph_memory = std::make_shared<SharedGraphMemory>(persistent.allocator());
    }
    graphs = std::make_unique<VocoderGraphs>(persistent, models.voice->vocoder(), frames,
                                             models.vocoder_graph_memory);
  }
  return *graphs;
}

const ArenaLayout& VocoderKind::plan(const VoiceEntry& voice, int64_t chunks, int64_t frames) {
  return plans_.get(std::make_tuple(&voice, chunks, frames), [&] {
    return plan_vocoder(runtime_.backend(), models_of(voice).voice->vocoder(), chunks, frames);
  });
}

uint64_t VocoderKind::footprint(const Batch& batch, size_t size) {
  VoiceEntry& voice = *batch.voice;
  const int64_t frames = frames_of(batch);
  const auto chunks = static_cast<int64_t>(size);
  // A recorded graph keeps its arena: replaying it takes nothing more; recording it takes
  // nothing more where its arena fits the memory the voice's graphs share, else its plan for good.
  if (use_graphs(voice, frames)) {
    const uint64_t bytes =
        graphs_of(voice, frames).bytes_to_record(graph_rows(voice, frames, chunks));
    return bytes == 0 ? 0 : MemoryBudget::footprint(bytes);
  }
  return MemoryBudget::footprint(plan(voice, chunks, frames).bytes());
}

StepRefusal VocoderKind::too_big(const Batch& batch, uint64_t footprint, uint64_t available) const {
  return {.request_too_large = false,
          .code = "insufficient_memory",
          .message = "one vocoder chunk of " + std::to_string(frames_of(batch)) +
                     " mel frames needs " + format_bytes(footprint) +
                     " of device memory, more than the " + format_bytes(available) +
                     " this server has for one step; start it with more memory or smaller "
                     "--chunk-frames"};
}

StepOutput VocoderKind::run(const Batch& batch, MemoryBudget& budget) {
  StepOutput output;
  const std::unique_ptr<StepInFlight> in_flight = start(batch, budget, output);
  return in_flight ? in_flight->finish() : output;
}

std::unique_ptr<StepInFlight> VocoderKind::start(const Batch& batch, MemoryBudget&,
                                                 StepOutput& output) {
  VoiceEntry& voice = *batch.voice;
  const HifiGan& vocoder = models_of(voice).voice->vocoder();
  const int64_t n_mels = vocoder.config().num_mels;
  const int64_t frames = frames_of(batch);
  const auto chunks = static_cast<int64_t>(batch.items.size());
  const std::vector<size_t> indices = chunk_indices(batch);

  const bool graphs = use_graphs(voice, frames);
  const int64_t rows = graphs ? graph_rows(voice, frames, chunks) : chunks;
  LoadedModels& models = models_of(voice);
  // A step that records its graph costs that once: it is left out of the step times.
  const bool recording = graphs && !recorded(voice, frames, rows);
  const auto started = Clock::now();
  // Shorter chunks (propose() took only those that may be) are padded on the right with zeros.
  Tensor mel = Tensor::zeros({rows, n_mels, frames}, DType::F32);
  std::vector<AudioCut> cuts;
  cuts.reserve(batch.items.size());
  for (size_t i = 0; i < batch.items.size(); ++i) {
    const MelChunk& chunk = work_of(*batch.items[i]).ready[indices[i]];
    const int64_t given_frames = chunk.mel.size(1);
    for (int64_t c = 0; c < n_mels; ++c) {
      std::memcpy(mel.data<float>() + (static_cast<int64_t>(i) * n_mels + c) * frames,
                  chunk.mel.data<float>() + c * given_frames,
                  static_cast<size_t>(given_frames) * sizeof(float));
    }
    cuts.push_back({chunk.skip_samples, chunk.samples, chunk.silence_after});
  }
  std::unique_ptr<StepInFlight> in_flight;
  if (graphs) {
    VocoderGraphs& step_graphs = graphs_of(voice, frames);
    step_graphs.start(mel);
    in_flight = std::make_unique<ReplayInFlight>(
        step_graphs, std::move(cuts), recording ? nullptr : &models.vocoder_times, rows, started);
  } else {
    const Tensor audio = run_vocoder_step(runtime_.backend(), runtime_.allocator(), vocoder, mel,
                                          plan(voice, chunks, frames));
    models.vocoder_times.record(rows, frames,
                                std::chrono::duration<double>(Clock::now() - started).count());
    output = cut_audio(audio, cuts);
  }
  // The chunks are taken: the streams' next ones are proposed from now on.
  for (size_t i = 0; i < batch.items.size(); ++i) {
    if (indices[i] == 0) {
      SentenceWork& work = work_of(*batch.items[i]);
      const size_t taken =
          static_cast<size_t>(std::count(batch.items.begin(), batch.items.end(), batch.items[i]));
      work.ready.erase(work.ready.begin(), work.ready.begin() + static_cast<std::ptrdiff_t>(taken));
    }
  }
  return in_flight;
}

void VocoderKind::warm_up(VoiceEntry& voice, const Pacing& pacing, MemoryBudget& budget) {
  warmed_.erase(&voice);  // a voice loaded again runs its pieces again
  const HifiGan& vocoder = models_of(voice).voice->vocoder();
  const int64_t first = first_frames(voice);
  if (!use_graphs(voice, first) &&
      budget.fits(MemoryBudget::footprint(plan(voice, 1, first).bytes()))) {
    (void)run_vocoder_step(runtime_.backend(), runtime_.allocator(), vocoder,
                           Tensor::zeros({1, vocoder.config().num_mels, first}, DType::F32),
                           plan(voice, 1, first));
  }
  record_graphs(voice, interior_frames(voice), pacing, budget);
  record_graphs(voice, first, pacing, budget);
}

void VocoderKind::record_graphs(VoiceEntry& voice, int64_t frames, const Pacing& pacing,
                                MemoryBudget& budget) {
  if (!use_graphs(voice, frames)) return;
  // The largest a step may take first, so that the smaller ones lie over the memory it takes; a
  // size that does not fit the budget is left out, and a smaller one may still.
  const int64_t largest = fine_batch(pacing.max_batch);
  record_graph(voice, frames, largest, budget);
  for (int64_t rows = power_of_two_batch(largest) / 2; rows >= 1; rows /= 2) {
    record_graph(voice, frames, rows, budget);
  }
}

void VocoderKind::record_graph(VoiceEntry& voice, int64_t frames, int64_t rows,
                               MemoryBudget& budget) {
  VocoderGraphs& graphs = graphs_of(voice, frames);
  if (graphs.recorded(rows)) return;
  const uint64_t bytes = graphs.bytes_to_record(rows);
  if (bytes > 0 && !budget.fits(MemoryBudget::footprint(bytes))) return;
  (void)graphs.run(Tensor::zeros({rows, config_of(voice).vocoder.num_mels, frames}, DType::F32));
}

bool VocoderKind::warm_further(VoiceEntry& voice, const Pacing& pacing, MemoryBudget& budget) {
  const HifiGan& vocoder = models_of(voice).voice->vocoder();
  // One piece per call: a step of the shapes that run without graphs, eagerly (warm_up ran a
  // first chunk alone), or a graph of a size between the powers of two warm_up recorded.
  struct Piece {
    int64_t rows;
    int64_t frames;
    bool graph;
  };
  std::vector<Piece> ladder;
  for (const int64_t frames : {first_frames(voice), interior_frames(voice)}) {
    if (use_graphs(voice, frames)) continue;
    const int64_t first_rows = frames == first_frames(voice) ? 2 : 1;
    for (int64_t rows = first_rows; rows < 2 * pacing.max_batch; rows *= 2) {
      ladder.push_back({std::min(rows, pacing.max_batch), frames, false});
    }
  }
  for (const int64_t frames : {first_frames(voice), interior_frames(voice)}) {
    if (!use_graphs(voice, frames)) continue;
    for (int64_t rows = fine_batch(pacing.max_batch) - 1; rows > 8; --rows) {
      if (fine_batch(rows) == rows && power_of_two_batch(rows) != rows) {
        ladder.push_back({rows, frames, true});
      }
    }
  }
  size_t& next = warmed_[&voice];
  if (next >= ladder.size()) return false;
  const Piece piece = ladder[next++];
  if (piece.graph) {
    // Only over the memory warm-up's graphs hold: a size that needs more is left to a step.
    if (graphs_of(voice, piece.frames).bytes_to_record(piece.rows) == 0) {
      record_graph(voice, piece.frames, piece.rows, budget);
    }
    return next < ladder.size();
  }
  const ArenaLayout& layout = plan(voice, piece.rows, piece.frames);
  if (budget.fits(MemoryBudget::footprint(layout.bytes()))) {
    (void)run_vocoder_step(
        runtime_.backend(), runtime_.allocator(), vocoder,
        Tensor::zeros({piece.rows, vocoder.config().num_mels, piece.frames}, DType::F32), layout);
  }
  return next < ladder.size();
}

}  // namespace voxd::fastspeech2
