// The acoustic model's steps in the server (served.h says what an utterance goes through), each
// batched across streams of one voice and planned by shape (steps.h):
//   EncodeKind   the encoder, pitch, energy and durations of streams' next utterances, padded
//                to the longest (within a band of lengths) and masked, so padding changes no
//                utterance; an utterance's frames are known after it;
//   PrefillKind  the decoder's memory of utterances whose pages are free, into pages of the
//                voice's KV pool, with pages for every step they will take;
//   DecodeKind   one decoder step for every decoding utterance of the voice, each at its own
//                step, reading its pages in place; its frames go to the stream's audio.
// An utterance whose pages are more than the pool has is refused; one whose pages are not free
// waits for them, in slack order, so a long utterance is not starved by short ones.
#pragma once

#include <cstdint>
#include <tuple>
#include <vector>

#include "core/workspace_arena.h"
#include "families/sambert/served.h"
#include "scheduler/memory_budget.h"
#include "scheduler/plan_cache.h"
#include "scheduler/scheduler_options.h"
#include "scheduler/step_kind.h"

namespace voxd::sambert {

class EncodeKind final : public scheduler::StepKind {
 public:
  EncodeKind(DeviceRuntime& runtime, const SambertLimits& limits)
      : runtime_(runtime), limits_(limits) {}

  const char* name() const override { return "encode"; }
  scheduler::Batch propose(const std::vector<std::shared_ptr<scheduler::Stream>>& streams,
                           const scheduler::Pacing& pacing,
                           scheduler::Clock::time_point now) override;
  uint64_t footprint(const scheduler::Batch& batch, size_t size) override;
  scheduler::StepRefusal too_big(const scheduler::Batch& batch, uint64_t footprint,
                                 uint64_t available) const override;
  scheduler::StepOutput run(const scheduler::Batch& batch,
                            scheduler::MemoryBudget& budget) override;
  // Encodes a made-up utterance of 8 tokens.
  void warm_up(scheduler::VoiceEntry& voice, const scheduler::Pacing& pacing,
               scheduler::MemoryBudget& budget) override;

 private:
  const ArenaLayout& plan(const scheduler::VoiceEntry& voice, int64_t batch, int64_t padded);

  DeviceRuntime& runtime_;
  SambertLimits limits_;
  scheduler::PlanCache<std::tuple<const scheduler::VoiceEntry*, int64_t, int64_t>> plans_;
};

class PrefillKind final : public scheduler::StepKind {
 public:
  // A stream's very first vocoder chunk is `first_chunk_frames` long, every other
  // `chunk_frames` (the vocoder kind's chunks).
  PrefillKind(DeviceRuntime& runtime, int64_t chunk_frames, int64_t first_chunk_frames)
      : runtime_(runtime), chunk_frames_(chunk_frames), first_chunk_frames_(first_chunk_frames) {}

  const char* name() const override { return "prefill"; }
  scheduler::Batch propose(const std::vector<std::shared_ptr<scheduler::Stream>>& streams,
                           const scheduler::Pacing& pacing,
                           scheduler::Clock::time_point now) override;
  uint64_t footprint(const scheduler::Batch& batch, size_t size) override;
  scheduler::StepRefusal too_big(const scheduler::Batch& batch, uint64_t footprint,
                                 uint64_t available) const override;
  scheduler::StepOutput run(const scheduler::Batch& batch,
                            scheduler::MemoryBudget& budget) override;
  // Prefills a made-up utterance of one page of steps into two pages of the pool and runs one
  // decoder step over them (loading both steps' kernels), then gives the pages back.
  void warm_up(scheduler::VoiceEntry& voice, const scheduler::Pacing& pacing,
               scheduler::MemoryBudget& budget) override;

 private:
  const ArenaLayout& plan(scheduler::VoiceEntry& voice, int64_t batch, int64_t padded);
  // warm_up's prefill and decoder step over the pages it took.
  void warm_up_steps(LoadedModels& models, const std::vector<int64_t>& memory_pages,
                     const std::vector<int64_t>& step_pages, const ArenaLayout& prefill,
                     const ArenaLayout& decode);

  DeviceRuntime& runtime_;
  int64_t chunk_frames_;
  int64_t first_chunk_frames_;
  scheduler::PlanCache<std::tuple<const scheduler::VoiceEntry*, int64_t, int64_t>> plans_;
};

class DecodeKind final : public scheduler::StepKind {
 public:
  explicit DecodeKind(DeviceRuntime& runtime) : runtime_(runtime) {}

  const char* name() const override { return "decode"; }
  scheduler::Batch propose(const std::vector<std::shared_ptr<scheduler::Stream>>& streams,
                           const scheduler::Pacing& pacing,
                           scheduler::Clock::time_point now) override;
  uint64_t footprint(const scheduler::Batch& batch, size_t size) override;
  scheduler::StepRefusal too_big(const scheduler::Batch& batch, uint64_t footprint,
                                 uint64_t available) const override;
  scheduler::StepOutput run(const scheduler::Batch& batch,
                            scheduler::MemoryBudget& budget) override;
  void warm_up(scheduler::VoiceEntry&, const scheduler::Pacing&,
               scheduler::MemoryBudget&) override {}

 private:
  // The plan of a step of `batch` utterances over page tables as wide as the bucket of the
  // widest of them.
  const ArenaLayout& plan(scheduler::VoiceEntry& voice, int64_t batch, int64_t step_width,
                          int64_t memory_width);

  DeviceRuntime& runtime_;
  scheduler::PlanCache<std::tuple<const scheduler::VoiceEntry*, int64_t, int64_t, int64_t>> plans_;
};

}  // namespace voxd::sambert
