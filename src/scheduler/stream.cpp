#include "scheduler/stream.h"

namespace voxd::scheduler {

double Stream::seconds_ahead(Clock::time_point now) const {
  if (!first_audio || sample_rate <= 0) return 0.0;
  const double made = static_cast<double>(produced_samples) / static_cast<double>(sample_rate);
  const double heard = std::chrono::duration<double>(now - *first_audio).count();
  return made - heard;
}

double Stream::slack(Clock::time_point now, double first_audio_due_s) const {
  if (first_audio) return seconds_ahead(now);
  return first_audio_due_s - std::chrono::duration<double>(now - admitted).count();
}

const MelChunk* Stream::peek_chunk(size_t index) {
  while (ready.size() <= index) {
    while (!chunkers.empty() && chunkers.front().done()) chunkers.pop_front();
    if (chunkers.empty() || !chunkers.front().has_chunk()) return nullptr;
    ready.push_back(chunkers.front().next_chunk());
  }
  return &ready[index];
}

int64_t Stream::held_mel_frames() const {
  int64_t frames = 0;
  for (const VocoderChunker& chunker : chunkers) frames += chunker.retained_frames();
  for (const MelChunk& chunk : ready) frames += chunk.mel.size(1);
  return frames;
}

}  // namespace voxd::scheduler
