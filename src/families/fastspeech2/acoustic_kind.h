// The acoustic model's steps: FastSpeech2 over the next sentence of several streams of one voice
// and speed, in two planned arenas (encoder, then decoder once the durations are known). Each
// sentence's mel goes into a VocoderChunker of its stream.
//
// Batching never changes a sentence's audio: the steps run with SynthesisControls::mask_padding
// (the original FastSpeech2 lets padding leak into the end of a shorter sequence), so a batch
// takes sentences within a band of lengths (SchedulerOptions::acoustic_length_band, 1.25 by
// default: the longest at most 1.25 times the lead's, the shortest at least the lead's over
// 1.25), padded to the longest, and decodes them together.
// The padded lengths are rounded up to a few sizes per octave (padded_length), so that steps
// of sentences that differ only a little share a shape, and with it the plan, the gemm shapes
// and the arena sizes of the steps before them.
//
// Where the backend records graphs, a step of at most kGraphSentences sentences goes through the
// voice's AcousticGraphs (recorded once per shape in the runtime's persistent context, their
// memory under a cap per voice, each recording admitted by the memory budget like any step):
// two replays instead of a few hundred launches. A shape that may not be recorded runs eagerly.
#pragma once

#include <cstdint>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "families/fastspeech2/acoustic_graphs.h"
#include "families/fastspeech2/scheduler_types.h"
#include "families/fastspeech2/workspace_steps.h"
#include "scheduler/plan_cache.h"
#include "scheduler/scheduler_options.h"

namespace voxd::fastspeech2 {

// The steps (sentences, symbols each) that warm_further runs, in order: batches of 16-symbol
// sentences from 1 to `max_batch`, doubling, then `max_batch` sentences of 32 to 256 symbols.
// The rows of every gemm (sentences × symbols, sentences × frames) double from step to step, so
// that each power-of-two bucket of rows a served step can meet has run once: cuBLAS picks its
// kernel by such size classes and loads each the first time it runs (~3 ms on an H200).
std::vector<std::pair<int64_t, int64_t>> warm_ladder(int64_t max_batch);
constexpr int64_t kWarmFramesPerPhoneme = 6;
// The most sentences a step runs through recorded graphs: beyond them the sentences' own work,
// not the launches, is most of a step's time, and each batch size records graphs of its own.
constexpr int64_t kGraphSentences = 8;

class AcousticKind final : public StepKind {
 public:
  // Sentences' mel cut into vocoder chunks of options.chunk_frames, a stream's very first chunk
  // of options.first_chunk_frames; batches within options.acoustic_length_band; each voice's
  // recorded steps within options.acoustic_graph_bytes (none without options.cuda_graphs).
  AcousticKind(DeviceRuntime& runtime, const scheduler::SchedulerOptions& options);

  const char* name() const override { return "acoustic"; }
  // Lane 1 with options.overlap_steps: the acoustic model's host-bound steps run while the
  // vocoder's GPU-bound ones, on lane 0, are on the device.
  size_t lane() const override { return lane_; }
  Batch propose(const std::vector<std::shared_ptr<Stream>>& streams, const Pacing& pacing,
                Clock::time_point now) override;
  uint64_t footprint(const Batch& batch, size_t size) override;
  StepRefusal too_big(const Batch& batch, uint64_t footprint, uint64_t available) const override;
  StepOutput run(const Batch& batch, MemoryBudget& budget) override;
  // Runs the encoder and decoder once on a sentence of 16 symbols (recording their graphs where
  // steps of one sentence are recorded).
  void warm_up(VoiceEntry& voice, const Pacing& pacing, MemoryBudget& budget) override;
  // One step of warm_ladder(pacing.max_batch) on made-up sentences of kWarmFramesPerPhoneme
  // frames a symbol (a step that does not fit the budget is left out).
  bool warm_further(VoiceEntry& voice, const Pacing& pacing, MemoryBudget& budget) override;

 private:
  // The plans of `voice`'s encoder step at (batch, phonemes) and decoder step at (batch,
  // phonemes, frames), each cached by its own shape.
  const AcousticEncoderPlan& encoder_plan(const VoiceEntry& voice, int64_t batch, int64_t phonemes);
  const ArenaLayout& decoder_plan(const VoiceEntry& voice, int64_t batch, int64_t phonemes,
                                  int64_t frames);
  // `voice`'s graphs when a step of `sentences` goes through them (made on first use); null when
  // it does not: more than kGraphSentences, no graph bytes, or a backend that cannot record.
  AcousticGraphs* graphs_for(VoiceEntry& voice, size_t sentences);
  // Decodes `encoding`, which graphs.encode() made, through the decoder's graph (recorded first
  // when the budget admits it), else through decode(): in place, or when it does not fit beside
  // the graphs on a copy of the hidden states that replaces them in `encoding` (so that the
  // graphs, `graphs` included, may go to make room); whether the graph ran.
  bool decode_recorded(AcousticGraphs& graphs, const Batch& batch, AcousticEncoding& encoding,
                       const SynthesisControls& controls, MemoryBudget& budget, StepOutput& out);
  // Decodes sequences [first, first + count) of `encoding` (padded to the padded_length of the
  // longest mel), each sentence's mel into its stream's chunkers; when they do not fit together,
  // one by one. A sequence whose decoder does not fit even alone fails its item, after the
  // budget's reclaim() when the encoding is not a graph's output (`in_graph`: its hidden states
  // live in a recorded encoder's arena).
  void decode(const Batch& batch, const AcousticEncoding& encoding, SynthesisControls controls,
              size_t first, size_t count, uint64_t carried, bool in_graph, MemoryBudget& budget,
              StepOutput& out);
  // Hands the mel of sequences [first, first + count) of `encoding`, `mel` [count, frames,
  // n_mels] on the host (F32), to their streams' chunkers.
  void to_chunkers(const Batch& batch, const AcousticEncoding& encoding, const Tensor& mel,
                   size_t first, size_t count);

  DeviceRuntime& runtime_;
  size_t lane_;
  int64_t chunk_frames_;
  int64_t first_chunk_frames_;
  uint64_t graph_bytes_;
  double length_band_;
  scheduler::PlanCache<std::tuple<const VoiceEntry*, int64_t, int64_t>, AcousticEncoderPlan>
      encoder_plans_;
  scheduler::PlanCache<std::tuple<const VoiceEntry*, int64_t, int64_t, int64_t>> decoder_plans_;
  // The next warm_ladder step of each voice.
  std::map<const VoiceEntry*, size_t> warmed_;
  // Seconds spent making new plans since the last step's debug log line (footprint() plans the
  // encoder before run()).
  double planning_s_ = 0;
  // Seconds in the decoder's run itself (its mel on the host) in this step: decoder_s less this
  // is its planning and the chunkers' setup.
  double decoder_run_s_ = 0;
};

}  // namespace voxd::fastspeech2
