// A stream's work in the FastSpeech2 + HiFiGAN family: the sentences still to go through the
// acoustic model, each sentence's mel cut into vocoder chunks, and the chunks waiting for the
// vocoder. The family's step kinds alone touch it, on the device thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "families/fastspeech2/vocoder_chunker.h"
#include "scheduler/stream.h"
#include "text/front_end.h"

namespace voxd::fastspeech2 {

class SentenceWork final : public scheduler::StreamWork {
 public:
  // A sentence as the acoustic model takes it: symbol ids, its rate (a multiplier of the stream's
  // speed, from SSML's <prosody rate>) and the silence after its audio (SSML's <break>).
  struct PendingSentence {
    std::vector<int64_t> ids;
    float rate = 1.0f;
    int64_t pause_samples = 0;
  };

  // The acoustic model takes the stream's next sentence only while it holds at most
  // `lookahead_frames` mel frames (about one vocoder chunk with its context), so mel held stays
  // under one sentence plus this.
  SentenceWork(float speed, int64_t lookahead_frames)
      : speed(speed), lookahead_frames(lookahead_frames) {}

  const float speed;
  const int64_t lookahead_frames;
  // Sentences not yet through the acoustic model, in order.
  std::deque<PendingSentence> sentences;
  // Each sentence's mel, cut into vocoder chunks, oldest sentence first.
  std::deque<VocoderChunker> chunkers;
  // Chunks taken from the chunkers and not yet vocoded, in stream order.
  std::deque<MelChunk> ready;
  // Mel frames of the largest sentence through the acoustic model so far.
  int64_t largest_sentence_frames = 0;

  // The next chunk to vocode, taken from the chunkers as needed; null when the stream has none
  // now. `index` counts from the oldest ready chunk.
  const MelChunk* peek_chunk(size_t index);
  // Mel frames held now: the chunkers' retained frames and the ready chunks.
  int64_t held_mel_frames() const;

  bool finished() const override;
  scheduler::StreamGauges gauges() const override;
  void release() override;
};

// Units a sentence keeps on each side of the clause mark first_clause_ids splits it at.
inline constexpr size_t kMinClauseUnits = 8;

// How many of `sentence`'s ids make its first clause, when it is worth speaking on its own (a
// stream's first audio then waits for the acoustic model of the clause alone): the units up to
// and including the first clause mark (",", ";" or ":"; for an ARPAbet voice the pause its front
// end makes of any run of , ; : . - ? !, text::kArpabetPause, so a dash inside a sentence ends a
// clause there too) that leaves at least kMinClauseUnits units before it (itself included) and
// after it. nullopt when there is none, or when units and ids do not pair one to one (units
// without an id were dropped).
std::optional<size_t> first_clause_ids(const text::Sentence& sentence);

}  // namespace voxd::fastspeech2
