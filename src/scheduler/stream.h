// One admitted request as the scheduler sees it: the sentences still to go through the acoustic
// model, the mel waiting for the vocoder, and the audio made and not yet taken by the HTTP layer.
// The HTTP layer's threads and the device thread share it through the Scheduler's mutex; the
// fields marked "device thread" are touched by the device thread alone.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "pipeline/vocoder_chunker.h"

namespace voxd::scheduler {

struct VoiceEntry;

using Clock = std::chrono::steady_clock;

struct Stream {
  enum class State { kRunning, kDone, kFailed, kCancelled };

  // Fixed at admission.
  uint64_t id = 0;
  VoiceEntry* voice = nullptr;
  float speed = 1.0f;
  Clock::time_point admitted;
  Clock::time_point deadline;
  int64_t sample_rate = 0;
  // The acoustic model takes a stream's next sentence only while it holds at most this many mel
  // frames (about one vocoder chunk with its context), so mel held stays under one sentence
  // plus this.
  int64_t lookahead_frames = 0;
  // The vocoder makes no more audio for the stream while this much is waiting for the client.
  int64_t max_buffered_samples = 0;

  // A sentence as the acoustic model takes it: symbol ids, its rate (a multiplier of the stream's
  // speed, from SSML's <prosody rate>) and the silence after its audio (SSML's <break>).
  struct PendingSentence {
    std::vector<int64_t> ids;
    float rate = 1.0f;
    int64_t pause_samples = 0;
  };
  // Device thread: sentences not yet through the acoustic model, in order.
  std::deque<PendingSentence> sentences;
  // Device thread: each sentence's mel, cut into vocoder chunks, oldest sentence first.
  std::deque<VocoderChunker> chunkers;
  // Device thread: chunks taken from the chunkers and not yet vocoded, in stream order.
  std::deque<MelChunk> ready;

  // Under the scheduler's mutex.
  State state = State::kRunning;
  std::exception_ptr error;              // why, when kFailed
  std::deque<std::vector<float>> audio;  // made, not yet taken by the HTTP layer
  int64_t buffered_samples = 0;          // in `audio`
  int64_t produced_samples = 0;          // ever made
  std::optional<Clock::time_point> first_audio;
  int64_t mel_frames = 0;               // mel held: chunkers' retained frames and ready chunks
  int64_t pending_sentences = 0;        // sentences.size()
  int64_t largest_sentence_frames = 0;  // of the sentences through the acoustic model so far
  bool finished_making = false;         // every sentence vocoded: `audio` is all there will be
  // Called (under the mutex) when the stream has news for Scheduler::take: audio, its end, a
  // failure. Empty before Scheduler::watch and after Scheduler::release.
  std::function<void()> wake;

  bool running() const { return state == State::kRunning; }
  // Seconds of audio made beyond what a listener who started at the first audio has heard by
  // `now`: how far ahead of real-time playback the stream is (0 before its first audio).
  double seconds_ahead(Clock::time_point now) const;
  // Seconds until the stream keeps its listener waiting, the key of earliest-deadline-first
  // scheduling: before the first audio, until that is due (`first_audio_due_s` after admission;
  // negative once overdue); after it, seconds_ahead().
  double slack(Clock::time_point now, double first_audio_due_s) const;
  // The next chunk to vocode, taken from the chunkers as needed (device thread); null when the
  // stream has none now. `index` counts from the oldest ready chunk.
  const MelChunk* peek_chunk(size_t index);
  // Mel frames the device thread holds for this stream now.
  int64_t held_mel_frames() const;
};

}  // namespace voxd::scheduler
