// ChatTTS's vocoding in the server: a stream's sentence, once its audio-code stage has ended,
// through the Decoder (hidden states → mel) and Vocos (mel → 24 kHz audio) in one planned step,
// while the audio waiting for its client has room (back-pressure). One stream per step: sentences
// differ in length, and a sentence is already hundreds of frames.
#pragma once

#include <cstdint>
#include <map>
#include <utility>

#include "core/workspace_arena.h"
#include "families/chattts/served.h"
#include "scheduler/memory_budget.h"
#include "scheduler/step_kind.h"

namespace voxd::chattts {

class VocodeKind final : public scheduler::StepKind {
 public:
  explicit VocodeKind(DeviceRuntime& runtime) : runtime_(runtime) {}

  // Distinct from FastSpeech2's "vocoder", so that a server of both families reports each apart.
  const char* name() const override { return "vocos"; }
  scheduler::Batch propose(const std::vector<std::shared_ptr<scheduler::Stream>>& streams,
                           const scheduler::Pacing& pacing,
                           scheduler::Clock::time_point now) override;
  uint64_t footprint(const scheduler::Batch& batch, size_t size) override;
  scheduler::StepRefusal too_big(const scheduler::Batch& batch, uint64_t footprint,
                                 uint64_t available) const override;
  scheduler::StepOutput run(const scheduler::Batch& batch,
                            scheduler::MemoryBudget& budget) override;
  void warm_up(scheduler::VoiceEntry& voice, const scheduler::Pacing& pacing,
               scheduler::MemoryBudget& budget) override;

 private:
  const ArenaLayout& plan(scheduler::VoiceEntry& voice, int64_t frames);

  DeviceRuntime& runtime_;
  std::map<std::pair<const scheduler::VoiceEntry*, int64_t>, ArenaLayout> plans_;
};

// The Decoder and Vocos over `frames` code frames' hidden states (host, [frames, hidden]) on ctx:
// the audio (a planning context when `hidden` is null: the same allocations, nothing read).
std::vector<float> vocode_step(Context& ctx, const Voice& voice, int64_t frames,
                               const std::vector<float>* hidden);

}  // namespace voxd::chattts
