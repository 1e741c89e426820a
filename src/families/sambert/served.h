// What serving a Sambert-HiFiGAN voice holds: the loaded voice with the decoder's keys and values
// in pages (one pool per voice, allocated at load beside the weights), and each stream's
// SentenceWork: its utterances on their way through the acoustic model's steps, and their frames
// on their way to audio. The step kinds (acoustic_kinds.h, vocoder_kind.h) touch them on the
// device thread only.
//
// An utterance is encoded (encoder, pitch, energy, durations: its frames known), prefilled (its
// memory's keys and values into pages, and pages for its own steps: all it will hold, taken at
// once, so a decoding utterance never waits for pages and none is preempted), then decoded a
// step at a time beside other streams' utterances; its pages go back when its last step is made.
// Its decoder frames go through the postnet and the vocoder in chunks as they come.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "core/kv_pages.h"
#include "families/sambert/sambert.h"
#include "families/sambert/voice.h"
#include "scheduler/family.h"
#include "scheduler/voice_pool.h"

namespace voxd::sambert {

// Decoder steps in a page of the KV pool.
inline constexpr int64_t kKvPageSize = 16;

// Pages of the KV pool an utterance of `steps` decoder steps holds while it is decoded: its
// memory's and its own steps'.
inline int64_t utterance_pages(int64_t steps) {
  return 2 * ((steps + kKvPageSize - 1) / kKvPageSize);
}

struct LoadedModels final : scheduler::LoadedVoice {
  std::unique_ptr<Voice> voice;
  PagedKvCache cache;
  std::unique_ptr<KvPagePool> pages;

  int64_t kv_cache_pages() const override { return pages->pages(); }
  uint64_t kv_cache_page_bytes() const override { return cache.page_bytes(); }
};

// An utterance in the acoustic model.
struct Utterance {
  enum class Stage { kPending, kEncoded, kDecoding };

  SambertTokens tokens;
  Stage stage = Stage::kPending;
  // From the encode step on.
  SambertAlignment alignment;
  SambertMemory memory;
  // From the prefill step on: the pages of its memory and of its own steps, the input
  // projection of its memory [L, decoder_units] (F32), the next step, and the last frame made.
  std::vector<int64_t> memory_pages;
  std::vector<int64_t> step_pages;
  std::vector<float> memory_input;
  int64_t step = 0;
  std::vector<float> previous_frame;
};

// An utterance's frames on their way to audio. Frames are kept from the first one a later
// chunk still needs (the postnet's context, the vocoder's).
struct UtteranceAudio {
  int64_t frames = 0;              // T
  int64_t first_chunk = 0;         // frames of its first vocoder chunk
  int64_t decoded = 0;             // decoder frames made
  int64_t postnet_done = 0;        // postnet frames made
  int64_t vocoded = 0;             // frames whose audio is out
  int64_t decoder_start = 0;       // the frame decoder_mel starts at
  std::vector<float> decoder_mel;  // [decoded − decoder_start, num_mels]
  int64_t postnet_start = 0;       // the frame postnet_mel starts at
  std::vector<float> postnet_mel;  // [postnet_done − postnet_start, num_mels]; NSF: f0 restored
  std::vector<float> h, c;         // the postnet LSTM's state after postnet_done frames
  // NSF voices: the utterance's source, the excitation of frames [postnet_start, postnet_done)
  // per harmonic ([harmonics + 1][frames · hop]: made once a frame), and the sum of f0 over
  // frames [0, postnet_done) (the source's phase where the next frames start).
  std::optional<NsfSource> source;
  std::vector<std::vector<float>> excitation;
  double f0_done = 0.0;
};

class SentenceWork final : public scheduler::StreamWork {
 public:
  // `decode_ahead`: decoder frames a stream may hold beyond those vocoded before it is decoded
  // no further (a client reading slowly holds the decoder back). `seed`: an NSF voice's source's
  // (the request's, or 0).
  SentenceWork(int64_t decode_ahead, uint64_t seed) : decode_ahead(decode_ahead), seed(seed) {}

  const int64_t decode_ahead;
  const uint64_t seed;
  // Utterances not yet decoded whole, in order; only the first is ever prefilled or decoding,
  // and the first two may be encoded.
  std::deque<Utterance> utterances;
  // Utterances with frames not yet vocoded, in order.
  std::deque<UtteranceAudio> audio;
  KvPagePool* pool = nullptr;  // where the first utterance's pages are from, once it has any
  int64_t prefilled = 0;       // utterances prefilled so far (the first's first chunk is small)

  // The utterance the encoder takes next, or null.
  Utterance* next_to_encode();
  const Utterance* next_to_encode() const;
  // The first utterance while it is being decoded and its audio may take more frames (or, with
  // `to_the_end`, while it is being decoded at all), or null.
  Utterance* decoding(bool to_the_end);
  // Decoder frames made and not yet vocoded.
  int64_t held_frames() const;
  // Gives the first utterance's pages back (when its last step is made, or the stream ends).
  void release_pages();

  bool finished() const override { return utterances.empty() && audio.empty(); }
  scheduler::StreamGauges gauges() const override;
  void release() override;
};

// The family's parts of an entry or stream of this family (the kinds see no other).
const VoiceConfig& config_of(const scheduler::VoiceEntry& entry);
LoadedModels& models_of(scheduler::VoiceEntry& entry);
const LoadedModels& models_of(const scheduler::VoiceEntry& entry);
SentenceWork& work_of(scheduler::Stream& stream);
const SentenceWork& work_of(const scheduler::Stream& stream);

}  // namespace voxd::sambert
