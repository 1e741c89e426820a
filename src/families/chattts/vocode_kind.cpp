#include "families/chattts/vocode_kind.h"

#include <algorithm>
#include <string>

#include "core/memory_summary.h"
#include "core/workspace_plan.h"

namespace voxd::chattts {
namespace {

using scheduler::Batch;
using scheduler::Stream;

constexpr size_t kMaxPlans = 4096;

int64_t frames_of(const Stream& stream) {
  return work_of(stream).generation.frames();
}

}  // namespace

std::vector<float> vocode_step(Context& ctx, const Voice& voice, int64_t frames,
                               const std::vector<float>* hidden) {
  const int64_t size = voice.gpt().config().hidden_size;
  const Tensor states = ops::to_device(
      ctx,
      hidden != nullptr
          ? Tensor::from_vector({1, frames, size}, *hidden)
          : Tensor::from_vector({1, frames, size},
                                std::vector<float>(static_cast<size_t>(frames * size), 0.0f)),
      DType::F32);
  const Tensor audio =
      ops::to_host(ctx, voice.vocos().forward(ctx, voice.decoder().decode_hidden(ctx, states)));
  return hidden != nullptr ? audio.to_float_vector() : std::vector<float>();
}

scheduler::Batch VocodeKind::propose(const std::vector<std::shared_ptr<Stream>>& streams,
                                     const scheduler::Pacing& pacing,
                                     scheduler::Clock::time_point now) {
  std::shared_ptr<Stream> lead;
  double lead_slack = 0.0;
  for (const std::shared_ptr<Stream>& stream : streams) {
    if (!stream->running() ||
        work_of(*stream).generation.next() != RequestGeneration::Next::kVocode ||
        stream->buffered_samples >= stream->max_buffered_samples) {
      continue;
    }
    const double slack = stream->slack(now, pacing.first_audio_due_s);
    if (!lead || slack < lead_slack) {
      lead = stream;
      lead_slack = slack;
    }
  }
  Batch batch;
  if (!lead) return batch;
  batch.urgency = urgency_of(*lead, pacing, now);
  batch.slack_s = lead_slack;
  batch.voice = lead->voice;
  batch.items = {lead};
  return batch;
}

const ArenaLayout& VocodeKind::plan(scheduler::VoiceEntry& voice, int64_t frames) {
  const auto key = std::make_pair(&voice, frames);
  auto at = plans_.find(key);
  if (at != plans_.end()) return at->second;
  if (plans_.size() >= kMaxPlans) plans_.clear();
  const Voice& models = *models_of(voice).voice;
  const ArenaLayout made = plan_workspace(
      runtime_.backend(), [&](Context& ctx) { (void)vocode_step(ctx, models, frames, nullptr); });
  return plans_.emplace(key, made).first->second;
}

uint64_t VocodeKind::footprint(const Batch& batch, size_t) {
  return scheduler::MemoryBudget::footprint(
      plan(*batch.voice, frames_of(*batch.items.front())).bytes());
}

scheduler::StepRefusal VocodeKind::too_big(const Batch& batch, uint64_t footprint,
                                           uint64_t available) const {
  return {.request_too_large = false,
          .code = "insufficient_memory",
          .message = "vocoding a sentence of " + std::to_string(frames_of(*batch.items.front())) +
                     " code frames needs " + format_bytes(footprint) +
                     " of device memory, more than the " + format_bytes(available) +
                     " this server has free for one step now"};
}

scheduler::StepOutput VocodeKind::run(const Batch& batch, scheduler::MemoryBudget&) {
  Stream& stream = *batch.items.front();
  GenerationWork& work = work_of(stream);
  const Voice& voice = *models_of(*batch.voice).voice;
  const int64_t frames = work.generation.frames();
  std::vector<float> audio;
  run_in_workspace(runtime_.backend(), runtime_.allocator(), plan(*batch.voice, frames),
                   [&](Context& ctx) {
                     audio = vocode_step(ctx, voice, frames, &work.generation.hidden_states());
                   });
  work.generation.vocoded();
  const std::vector<float> pause = pauses_since(work);
  audio.insert(audio.end(), pause.begin(), pause.end());
  scheduler::StepOutput out;
  out.audio = {std::move(audio)};
  out.errors.resize(1);
  return out;
}

void VocodeKind::warm_up(scheduler::VoiceEntry& voice, const scheduler::Pacing&,
                         scheduler::MemoryBudget& budget) {
  constexpr int64_t kFrames = 16;
  const ArenaLayout& layout = plan(voice, kFrames);
  if (!budget.fits(scheduler::MemoryBudget::footprint(layout.bytes()))) return;
  const Voice& models = *models_of(voice).voice;
  const std::vector<float> hidden(static_cast<size_t>(kFrames * models.gpt().config().hidden_size),
                                  0.0f);
  run_in_workspace(runtime_.backend(), runtime_.allocator(), layout,
                   [&](Context& ctx) { (void)vocode_step(ctx, models, kFrames, &hidden); });
}

}  // namespace voxd::chattts
