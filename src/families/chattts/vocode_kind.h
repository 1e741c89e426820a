// ChatTTS's vocoding in the server: streams' chunks of code frames (served.h: cut from the code
// stage's hidden states as the GPT makes them, with the context that makes each chunk's audio
// its share of the whole sentence's) through the Decoder (hidden states → mel) and Vocos (mel →
// 24 kHz audio) in one planned step, while the audio waiting for each client has room
// (back-pressure). Chunks of the same rows from several streams run together (every chunk with
// full context has the same rows).
#pragma once

#include <cstdint>
#include <tuple>

#include "core/workspace_arena.h"
#include "families/chattts/served.h"
#include "scheduler/memory_budget.h"
#include "scheduler/plan_cache.h"
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
  const ArenaLayout& plan(scheduler::VoiceEntry& voice, int64_t batch, int64_t rows);

  DeviceRuntime& runtime_;
  scheduler::PlanCache<std::tuple<const scheduler::VoiceEntry*, int64_t, int64_t>> plans_;
};

}  // namespace voxd::chattts
