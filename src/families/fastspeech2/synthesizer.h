// The path from text to audio for one voice: front end → acoustic model → vocoder, sentence by
// sentence so memory does not grow with the length of the text.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/ops.h"
#include "families/fastspeech2/voice.h"
#include "text/front_end.h"

namespace voxd {

class VocoderGraphs;

struct Utterance;

// Called by Synthesizer::synthesize_text after each sentence with what has been synthesized so
// far (so_far.sentences of `sentences_total`, so_far.samples of audio).
using SentenceProgress = std::function<void(const Utterance& so_far, int64_t sentences_total)>;

struct SynthesisOptions {
  int64_t speaker = 0;
  // Speaking rate: 2 is twice as fast (ming024's duration control is 1 / speed).
  float speed = 1.0f;
  // Multiply the predicted pitch and energy (ming024's p_control and e_control).
  float pitch = 1.0f;
  float energy = 1.0f;
  // Keep the mel spectrogram of the whole utterance in Utterance::mel.
  bool keep_mel = false;
  // Mel frames of audio per vocoder run (VocoderChunker), so audio reaches the sink chunk by chunk
  // and the vocoder's working memory does not grow with the sentence; 0 vocodes each sentence at
  // once. Each chunk also vocodes R frames of context on each side (R = 13 for HiFiGAN V1/V2, 11
  // for V3), 2R / chunk_frames more vocoder work; the audio is the same to float rounding. The
  // default stays 0: `voxd synth` writes a file, where that extra work (en-demo on one CPU thread:
  // about +15 % time at 64 or 128 frames) buys little; a streaming caller sets it.
  int64_t chunk_frames = 0;
  // With chunk_frames > 0: run the vocoder on interior chunks (all of one shape) by replaying a
  // recorded CUDA graph (VocoderGraphs) instead of launching its kernels one by one. Ignored on
  // backends that cannot record graphs (cpu, reference). The graph keeps the vocoder's arena for
  // that shape on the device until the Synthesizer goes (Synthesizer::graph_bytes()).
  bool use_cuda_graphs = true;
  // Told after each sentence of synthesize_text, e.g. for a progress line; may be empty.
  SentenceProgress on_sentence;
};

// Receives audio as soon as it is synthesized: each sentence's, or each chunk's when
// SynthesisOptions::chunk_frames is set.
using AudioSink = std::function<void(const float* samples, size_t count)>;

// What a synthesis produced; the audio itself went to the AudioSink.
struct Utterance {
  int64_t sample_rate = 0;
  int64_t samples = 0;
  int64_t mel_frames = 0;
  int64_t sentences = 0;
  // [n_mels, mel_frames] on the host when SynthesisOptions::keep_mel, else undefined.
  Tensor mel;
};

class Synthesizer {
 public:
  // The voice must outlive the synthesizer and have its acoustic model loaded.
  Synthesizer(Context& ctx, const Voice& voice);
  ~Synthesizer();

  // Normalises, splits and phonemises `text`, then synthesizes each sentence in turn, handing
  // its audio to `sink`: each at options.speed times its Sentence::rate, followed by its
  // Sentence::pause_after_ms of silence (in the audio only: Utterance::mel and mel_frames hold
  // the speech frames). Throws voxd::InputError for text with nothing to pronounce or options
  // out of range (before any audio is produced).
  Utterance synthesize_text(std::string_view text, const SynthesisOptions& options,
                            const AudioSink& sink) const;
  // Synthesizes one sequence of symbol ids.
  Utterance synthesize_ids(const std::vector<int64_t>& ids, const SynthesisOptions& options,
                           const AudioSink& sink) const;

  // Device bytes the vocoder graphs hold (SynthesisOptions::use_cuda_graphs); 0 when none.
  uint64_t graph_bytes() const;

 private:
  // The vocoder graphs for chunks of `chunk_frames`, made on first use; null when `options` or
  // the backend rule them out.
  VocoderGraphs* vocoder_graphs(const SynthesisOptions& options) const;
  // `rate` multiplies options.speed for this sentence (text::Sentence::rate).
  void synthesize_sentence(const std::vector<int64_t>& ids, const SynthesisOptions& options,
                           float rate, const AudioSink& sink, Utterance& out,
                           std::vector<Tensor>& mels) const;

  Context& ctx_;
  const Voice& voice_;
  std::unique_ptr<const text::FrontEnd> front_end_;
  mutable std::unique_ptr<VocoderGraphs> graphs_;
};

// Runs the voice's vocoder on a host mel [n_mels, T] (or [1, n_mels, T]); returns T × hop samples.
// chunk_frames > 0 vocodes it in chunks of that many frames (see SynthesisOptions::chunk_frames),
// 0 at once. Throws voxd::InputError when the mel's shape does not fit the vocoder, it holds a
// non-finite value, or chunk_frames < 0.
std::vector<float> vocode(Context& ctx, const Voice& voice, const Tensor& mel,
                          int64_t chunk_frames = 0);

}  // namespace voxd
