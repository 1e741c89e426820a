// The engine's scheduling options, shared by the scheduler and the families' step kinds.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace voxd::scheduler {

struct SchedulerOptions {
  int64_t max_batch = 16;
  size_t max_queue = 256;
  // A vocoder chunk, in mel frames: the unit in which a stream's mel becomes audio.
  int64_t chunk_frames = 64;
  // A stream's first vocoder chunk (1..chunk_frames): less work before its first audio.
  int64_t first_chunk_frames = 32;
  std::chrono::milliseconds request_timeout{300000};
  bool cuda_graphs = true;
  // Steps of a kind on a lane of its own (DeviceRuntime::lanes; a FastSpeech2 voice's acoustic
  // model) run while a vocoder step's device work is still queued; false (the default): every
  // step on lane 0, one at a time. Off by default: a burst of 1,000 on H100s came 13–14 %
  // sooner with it on two machines, the same on a third and 25 % later, with stalls, on a fourth
  // (docs/benchmarks.md, session 40).
  bool overlap_steps = false;
  // A FastSpeech2 acoustic step takes sentences whose phoneme counts are within this factor (at
  // least 1) of its lead's: wider, fewer steps with more padding (masked, so it costs time, not
  // correctness).
  double acoustic_length_band = 1.25;
  // Device bytes each FastSpeech2 voice's recorded acoustic steps of small batches may hold (the
  // least recently used go first); 0: none are recorded.
  uint64_t acoustic_graph_bytes = uint64_t{256} << 20;
  // Whether the device thread, while no step waits, runs the step kinds' warm_further pieces
  // after the warm-up; unset: where the backend's first runs of a size cost more.
  std::optional<bool> warm_up_while_idle;
  // Vocoder chunks of audio a stream may have waiting for its client before it gets no more
  // work.
  int64_t buffered_chunks = 4;
  double starving_below_s = 1.0;
  // A stream's first sentence, where it has a clause mark past its first few units, goes through
  // the acoustic model as that first clause and then the rest (FastSpeech2 voices), so that the
  // first audio waits for the clause only; the clause and the rest are each spoken without the
  // other's context.
  bool first_clause_alone = false;
  // A new request's first audio is due this long after admission (Pacing::first_audio_due_s).
  double first_audio_due_s = 0.2;
  // Device bytes for each loaded voice's KV cache pool, for families whose streams hold one
  // (ChatTTS); 0: the family's default (enough for max_batch streams of its longest sentence).
  uint64_t kv_cache_bytes = 0;
  // The most positions of one stream a GPT prefill step runs (ChatTTS): a longer prefill, such as
  // a preempted stage recomputed over every position it had reached, goes in pieces over its
  // cache, so that a step's memory does not grow with the stream's position.
  int64_t prefill_chunk_tokens = 512;
};

}  // namespace voxd::scheduler
