// The vocoder's steps: the postnet and KAN-TTS's HiFiGAN over the next chunk of many streams'
// utterances at once (steps.h's vocode step). A chunk is frames [a, b) of an utterance: the
// postnet makes its frames from the decoder's (the FSMN looks postnet_context() frames back and
// postnet_lookahead() ahead, its LSTM goes on from the state the last chunk left), and the
// vocoder makes their audio with the postnet frames before them as its left context (and, for a
// vocoder that looks ahead, the frames after), so the chunks' audio equals the utterance's made
// in one piece. A chunk waits until the decoder has made the frames it needs, and a stream gets
// chunks only while the audio waiting for its client has room for them (back-pressure).
#pragma once

#include <cstdint>
#include <tuple>

#include "core/workspace_arena.h"
#include "families/sambert/served.h"
#include "scheduler/memory_budget.h"
#include "scheduler/plan_cache.h"
#include "scheduler/step_kind.h"

namespace voxd::sambert {

class VocoderKind final : public scheduler::StepKind {
 public:
  // Chunks of `chunk_frames`, an utterance's first of the frames its audio entry says.
  VocoderKind(DeviceRuntime& runtime, int64_t chunk_frames)
      : runtime_(runtime), chunk_frames_(chunk_frames) {}

  const char* name() const override { return "vocoder"; }
  scheduler::Batch propose(const std::vector<std::shared_ptr<scheduler::Stream>>& streams,
                           const scheduler::Pacing& pacing,
                           scheduler::Clock::time_point now) override;
  uint64_t footprint(const scheduler::Batch& batch, size_t size) override;
  scheduler::StepRefusal too_big(const scheduler::Batch& batch, uint64_t footprint,
                                 uint64_t available) const override;
  scheduler::StepOutput run(const scheduler::Batch& batch,
                            scheduler::MemoryBudget& budget) override;
  // Runs a step of one chunk of chunk_frames on made-up frames.
  void warm_up(scheduler::VoiceEntry& voice, const scheduler::Pacing& pacing,
               scheduler::MemoryBudget& budget) override;

  // The next chunk of a stream's first utterance with audio to make.
  struct Chunk {
    int64_t begin = 0;   // a: its first frame
    int64_t end = 0;     // b
    int64_t frames = 0;  // the chunk size it is cut at (b − a, or more for the last chunk)
    int64_t vocoder_frames = 0;  // the vocoder's input: postnet frames before, in and after it
    bool ready = false;          // the decoder has made the frames it needs
  };
  Chunk next_chunk(const scheduler::Stream& stream) const;

 private:
  // The step of `batch` chunks like `lead`.
  const ArenaLayout& plan(const scheduler::VoiceEntry& voice, int64_t batch, const Chunk& lead);
  static int64_t vocoder_frames(const scheduler::VoiceEntry& voice, const Chunk& lead);

  DeviceRuntime& runtime_;
  int64_t chunk_frames_;
  scheduler::PlanCache<std::tuple<const scheduler::VoiceEntry*, int64_t, int64_t, int64_t>> plans_;
};

}  // namespace voxd::sambert
