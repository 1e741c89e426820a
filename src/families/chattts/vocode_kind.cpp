#include "families/chattts/vocode_kind.h"

#include <algorithm>
#include <string>

#include "core/memory_summary.h"
#include "core/workspace_plan.h"

namespace voxd::chattts {
namespace {

using scheduler::Batch;
using scheduler::Stream;

struct Candidate {
  std::shared_ptr<Stream> stream;
  double slack;
};

// The rows of the chunk `stream` vocodes next (it has one: propose() saw it).
int64_t rows_of(Stream& stream) {
  return work_of(stream).next_chunk()->rows;
}

}  // namespace

scheduler::Batch VocodeKind::propose(const std::vector<std::shared_ptr<Stream>>& streams,
                                     const scheduler::Pacing& pacing,
                                     scheduler::Clock::time_point now) {
  std::vector<Candidate> candidates;
  for (const std::shared_ptr<Stream>& stream : streams) {
    if (!stream->running() || stream->buffered_samples >= stream->max_buffered_samples ||
        work_of(*stream).next_chunk() == nullptr) {
      continue;
    }
    candidates.push_back({stream, stream->slack(now, pacing.first_audio_due_s)});
  }
  Batch batch = scheduler::lead_by_slack(candidates, pacing, now);
  if (candidates.empty()) return batch;
  // The lead's chunk and those of the same rows (its voice) behind it, least slack first.
  const int64_t rows = rows_of(*candidates.front().stream);
  for (const Candidate& c : candidates) {
    if (static_cast<int64_t>(batch.items.size()) >= pacing.max_batch) break;
    if (c.stream->voice == batch.voice && rows_of(*c.stream) == rows) {
      batch.items.push_back(c.stream);
    }
  }
  return batch;
}

const ArenaLayout& VocodeKind::plan(scheduler::VoiceEntry& voice, int64_t batch, int64_t rows) {
  return plans_.get(std::make_tuple(&voice, batch, rows), [&] {
    const Voice& models = *models_of(voice).voice;
    return plan_workspace(runtime_.backend(), [&](Context& ctx) {
      plan_vocode_chunks(ctx, models.decoder(), models.vocos(), batch, rows);
    });
  });
}

uint64_t VocodeKind::footprint(const Batch& batch, size_t size) {
  return scheduler::MemoryBudget::footprint(
      plan(*batch.voice, static_cast<int64_t>(size), rows_of(*batch.items.front())).bytes());
}

scheduler::StepRefusal VocodeKind::too_big(const Batch& batch, uint64_t footprint,
                                           uint64_t available) const {
  return {.request_too_large = false,
          .code = "insufficient_memory",
          .message = "vocoding a chunk of " + std::to_string(rows_of(*batch.items.front())) +
                     " code frames needs " + format_bytes(footprint) +
                     " of device memory, more than the " + format_bytes(available) +
                     " this server has free for one step now"};
}

scheduler::StepOutput VocodeKind::run(const Batch& batch, scheduler::MemoryBudget&) {
  const Voice& voice = *models_of(*batch.voice).voice;
  const size_t n = batch.items.size();
  std::vector<CodeChunk> chunks;
  std::vector<const CodeChunk*> inputs;
  chunks.reserve(n);
  for (const auto& stream : batch.items) chunks.push_back(work_of(*stream).take_chunk());
  for (const CodeChunk& chunk : chunks) inputs.push_back(&chunk);
  std::vector<std::vector<float>> audio;
  run_in_workspace(
      runtime_.backend(), runtime_.allocator(),
      plan(*batch.voice, static_cast<int64_t>(n), chunks.front().rows),
      [&](Context& ctx) { audio = vocode_chunks(ctx, voice.decoder(), voice.vocos(), inputs); });
  scheduler::StepOutput out;
  out.errors.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const std::vector<float> pause = work_of(*batch.items[i]).take_finished_pauses();
    audio[i].insert(audio[i].end(), pause.begin(), pause.end());
  }
  out.audio = std::move(audio);
  return out;
}

void VocodeKind::warm_up(scheduler::VoiceEntry& voice, const scheduler::Pacing&,
                         scheduler::MemoryBudget& budget) {
  const Voice& models = *models_of(voice).voice;
  const CodeChunker shape(models.config().decoder, models.config().vocos, kStreamChunkFrames,
                          kFirstStreamChunkFrames);
  const int64_t rows = shape.max_retained_frames();
  const ArenaLayout& layout = plan(voice, 1, rows);
  if (!budget.fits(scheduler::MemoryBudget::footprint(layout.bytes()))) return;
  CodeChunk chunk;
  chunk.rows = rows;
  chunk.hidden.assign(static_cast<size_t>(rows * models.gpt().config().hidden_size), 0.0f);
  chunk.samples = models.config().vocos.hop_length;
  run_in_workspace(runtime_.backend(), runtime_.allocator(), layout, [&](Context& ctx) {
    (void)vocode_chunk(ctx, models.decoder(), models.vocos(), chunk);
  });
}

}  // namespace voxd::chattts
