// What serving a ChatTTS voice holds: the loaded voice with its KV cache in pages (one pool per
// voice, allocated at load with the weights, so it is part of the memory the server holds from
// the start), and each stream's RequestGeneration with the pages its current GPT stage holds and
// its sentences' audio on the way: the code stage's hidden states cut into chunks as they come
// (code_chunker.h), so that audio streams within a sentence. The step kinds (gpt_kinds.h,
// vocode_kind.h) touch them on the device thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "core/kv_pages.h"
#include "families/chattts/code_chunker.h"
#include "families/chattts/decode_graphs.h"
#include "families/chattts/generation.h"
#include "families/chattts/gpt.h"
#include "families/chattts/synthesizer.h"
#include "scheduler/family.h"
#include "scheduler/voice_pool.h"

namespace voxd::chattts {

// Code frames of a streamed chunk's own audio at most, and of a sentence's first chunk (small, for
// time to first audio; the chunks between grow with the audio sent). ChatTTS streams every 24;
// each chunk carries 52 frames of context on either side here (exactness), so a chunk of 24 is a
// fifth of the vocoder's work and one of 96 half: on the H200 a vocoder step of 100 chunks makes
// 825 audio-seconds a second at 24 and 2,361 at 96 (bench/NOTES.md, session 16).
constexpr int64_t kStreamChunkFrames = 96;
constexpr int64_t kFirstStreamChunkFrames = 8;

struct LoadedModels final : scheduler::LoadedVoice {
  std::unique_ptr<Voice> voice;
  PagedKvCache cache;
  std::unique_ptr<KvPagePool> pages;
  std::unique_ptr<DecodeGraphs> decode_graphs;  // made on the first decode step that records
  // Seconds a decode step takes lately (a moving average; 0 before the first), which the GPT
  // kinds weigh a stream's remaining steps to its first audio by.
  double decode_step_seconds = 0.0;

  int64_t kv_cache_pages() const override { return pages->pages(); }
  uint64_t kv_cache_page_bytes() const override;
};

// A stream's state: its generation; the pages of the pool its GPT stage holds (those of its
// prefill's positions, one more each time its last is full, all given back when the stage ends,
// the stream ends or is preempted); and its sentences whose audio is not all out, in order, each
// a chunker of its code stage's hidden states and the pause after it.
class GenerationWork final : public scheduler::StreamWork {
 public:
  // `config` must outlive the work.
  GenerationWork(RequestGeneration generation, const VoiceConfig& config);

  RequestGeneration generation;
  std::vector<int64_t> pages;
  KvPagePool* pool = nullptr;  // the pool `pages` are from, once the stream has taken any
  // The most positions its prefill's next pieces may run, where the memory budget could not hold
  // a longer one (GptKind::shrink); 0: the kind's prefill_chunk_tokens. Gone with the prefill.
  int64_t prefill_piece_limit = 0;

  // Gives the stage's pages back (when it has ended).
  void release_pages();
  // Gives the pages back mid-stage: the stage will be recomputed (RequestGeneration::preempt).
  void preempt();

  // After a GPT step: moves the code stage's new hidden states into the current sentence's
  // chunker, and when the stage has ended, finishes the sentence (its pause recorded) and moves
  // the generation on to the next one (it never waits in kVocode: the chunks carry the audio).
  void collect();
  // The chunk the vocoder takes next (the first sentence's, cut here when ready and kept until
  // taken), or null when none is ready; then take_chunk() hands it over.
  const CodeChunk* next_chunk();
  CodeChunk take_chunk();
  // The pauses of the leading sentences whose audio is all out (removing them): the silence to
  // follow the audio already made.
  std::vector<float> take_finished_pauses();
  // Whether the hidden states held wait for the vocoder (a client reading slowly): the GPT then
  // makes no more for this stream until they go, so that what it holds stays bounded.
  bool audio_backlogged() const;
  // Code frames the GPT must still make before the stream's next chunk of audio can be cut: the
  // first sentence's chunker's frames_until_chunk(), or a whole first chunk and its context
  // before the code stage has begun.
  int64_t frames_before_next_chunk() const;

  bool finished() const override;
  scheduler::StreamGauges gauges() const override;
  void release() override { release_pages(); }

 private:
  struct SentenceAudio {
    CodeChunker chunker;
    bool ended = false;
    int64_t pause_samples = 0;
  };
  SentenceAudio& current_sentence();
  int64_t rows_held() const;

  const VoiceConfig& config_;
  int64_t frames_to_first_chunk_;  // a sentence's first chunk and its right context
  std::deque<SentenceAudio> sentences_;
  std::optional<CodeChunk> next_chunk_;  // cut from sentences_.front(), not vocoded yet
  int64_t sentences_ended_ = 0;
};

LoadedModels& models_of(scheduler::VoiceEntry& entry);
GenerationWork& work_of(scheduler::Stream& stream);
const GenerationWork& work_of(const scheduler::Stream& stream);

}  // namespace voxd::chattts
