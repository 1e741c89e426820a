// The vocoder's steps: HiFiGAN over mel chunks of many streams of one voice at once, all of one
// shape (interior chunks share one, so streams in full flow batch together; shorter chunks that do
// not reach their stream's end are padded on the right to join them), in one planned arena or,
// where the backend records graphs and the chunks are interior or streams' first ones, through
// the voice's VocoderGraphs for that shape: such a step is started (its replay queued) and
// finished once the scheduler has run a step of another lane beside it. A stream gets chunks
// only while the audio waiting for its client has room for them (back-pressure), and a step
// takes a stream's later chunks only while it is expected to end before the most urgent stream
// runs out of audio.
#pragma once

#include <cstdint>
#include <map>
#include <tuple>

#include "core/workspace_arena.h"
#include "families/fastspeech2/scheduler_types.h"
#include "families/fastspeech2/vocoder_graphs.h"
#include "scheduler/plan_cache.h"

namespace voxd::fastspeech2 {

class VocoderKind final : public StepKind {
 public:
  // `cuda_graphs`: run interior chunks and streams' first chunks through recorded graphs (in the
  // runtime's persistent context) where the backend can. A stream's first chunk has
  // `first_chunk_frames` and its right context, where it does not reach its sentence's end.
  VocoderKind(DeviceRuntime& runtime, int64_t chunk_frames, int64_t first_chunk_frames,
              bool cuda_graphs)
      : runtime_(runtime),
        chunk_frames_(chunk_frames),
        first_chunk_frames_(first_chunk_frames),
        cuda_graphs_(cuda_graphs) {}

  const char* name() const override { return "vocoder"; }
  Batch propose(const std::vector<std::shared_ptr<Stream>>& streams, const Pacing& pacing,
                Clock::time_point now) override;
  uint64_t footprint(const Batch& batch, size_t size) override;
  StepRefusal too_big(const Batch& batch, uint64_t footprint, uint64_t available) const override;
  StepOutput run(const Batch& batch, MemoryBudget& budget) override;
  // A step through recorded graphs returns with its replay queued; any other runs whole.
  std::unique_ptr<StepInFlight> start(const Batch& batch, MemoryBudget& budget,
                                      StepOutput& output) override;
  // Records the graphs of max_batch (among four sizes an octave above 8) and of the powers of two
  // below it, of interior chunks and then of streams' first chunks, largest first, while the
  // budget allows; where graphs are off, runs a stream's first chunk shape once.
  void warm_up(VoiceEntry& voice, const Pacing& pacing, MemoryBudget& budget) override;
  // One more piece of warming: a batch size, doubling up to max_batch, of the chunk shapes that
  // run without graphs, so that the libraries' kernels for them are loaded; then the graphs of
  // the sizes between the powers of two above 8, largest first and only over the memory the
  // recorded graphs hold, so that steps pad less.
  bool warm_further(VoiceEntry& voice, const Pacing& pacing, MemoryBudget& budget) override;

 private:
  // The mel frames of the batch's chunks.
  static int64_t frames_of(const Batch& batch);
  // The seconds a step of `chunks` chunks of `frames` of `voice` is expected to take, by its
  // recent steps (LoadedModels::vocoder_times); 0 while nothing was measured or it is not loaded.
  double expected_step_seconds(const VoiceEntry& voice, int64_t chunks, int64_t frames) const;
  // The mel frames of `voice`'s interior chunks and of its streams' first chunks.
  int64_t interior_frames(const VoiceEntry& voice) const;
  int64_t first_frames(const VoiceEntry& voice) const;
  // Whether chunks of `frames` of `voice` run through recorded graphs.
  bool use_graphs(const VoiceEntry& voice, int64_t frames) const;
  // Whether `voice`'s graphs for chunks of `frames` hold a recorded batch of `rows`.
  static bool recorded(const VoiceEntry& voice, int64_t frames, int64_t rows);
  // The batch a step of `chunks` chunks of `frames` runs as through graphs: the smallest recorded
  // size that holds them, where it pads them at most to the next power of two, else their size
  // among four an octave above 8 (recorded by the step).
  static int64_t graph_rows(const VoiceEntry& voice, int64_t frames, int64_t chunks);
  // `voice`'s graphs for chunks of `frames`, made (in the runtime's persistent context) on first
  // use.
  VocoderGraphs& graphs_of(VoiceEntry& voice, int64_t frames);
  // Records `voice`'s graphs for chunks of `frames` at max_batch's size and each power of two
  // below it, largest first, each where `budget` allows.
  void record_graphs(VoiceEntry& voice, int64_t frames, const Pacing& pacing, MemoryBudget& budget);
  // Records the graph of `rows` chunks of `frames` unless it is recorded or `budget` does not
  // allow the memory it takes.
  void record_graph(VoiceEntry& voice, int64_t frames, int64_t rows, MemoryBudget& budget);
  // plan_vocoder of `voice` at (chunks, frames), cached.
  const ArenaLayout& plan(const VoiceEntry& voice, int64_t chunks, int64_t frames);

  DeviceRuntime& runtime_;
  int64_t chunk_frames_;
  int64_t first_chunk_frames_;
  bool cuda_graphs_;
  scheduler::PlanCache<std::tuple<const VoiceEntry*, int64_t, int64_t>> plans_;
  // The next warm_further step of each voice.
  std::map<const VoiceEntry*, size_t> warmed_;
};

}  // namespace voxd::fastspeech2
