// A loaded Sambert-HiFiGAN voice: its config, the acoustic model and the vocoder on one device;
// and `voxd synth`'s way of speaking with it, an utterance at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "families/sambert/front_end.h"
#include "families/sambert/hifigan.h"
#include "families/sambert/sambert.h"
#include "families/sambert/voice_config.h"

namespace voxd::sambert {

class Voice {
 public:
  // Both models of the voice `config` describes onto ctx's device in `dtype`. Throws
  // voxd::InputError naming the file for missing or misshapen weights, or symbol lists that do
  // not fit the model's tables.
  static std::unique_ptr<Voice> load(Context& ctx, VoiceConfig config, DType dtype = DType::F32);
  Voice(const Voice&) = delete;
  Voice& operator=(const Voice&) = delete;

  const VoiceConfig& config() const { return config_; }
  const Sambert& acoustic() const { return acoustic_; }
  const KanTtsHifiGan& vocoder() const { return vocoder_; }
  const SymbolFrontEnd& front_end() const { return front_end_; }

 private:
  Voice(VoiceConfig config, Sambert acoustic, KanTtsHifiGan vocoder);

  VoiceConfig config_;
  Sambert acoustic_;
  KanTtsHifiGan vocoder_;
  SymbolFrontEnd front_end_;
};

// KAN-TTS's denorm_f0 on `count` frames [count, num_mels] of an NSF voice's postnet output, in
// place: voicing 1 from 0.6 up and 0 below, f0 back to Hz (VoiceConfig::f0_scale, f0_offset), at
// least 30 Hz.
void restore_f0(const VoiceConfig& config, float* frames, int64_t count);

// The NSF source of a request's utterance `index`: its phases and noise from the request's seed
// and the utterance's place, so that the same request makes the same audio however it is cut.
NsfSource nsf_source(const VoiceConfig& config, uint64_t seed, int64_t index);

// The vocoder's input from `count` postnet frames [count, num_mels] (for NSF, f0 restored):
// their mel channels into mel[m · stride + f] for f < count (f0 and voicing left out).
void mel_columns(const VoiceConfig& config, const float* frames, int64_t count, float* mel,
                 int64_t stride);
// An NSF voice's excitation [harmonics + 1, count · hop] of `count` postnet frames (f0
// restored), the utterance's frames [first, first + count), from `source`; `f0_before` is the
// sum of f0 over the utterance's frames before them (f0_sum).
std::vector<float> excitation_of(const VoiceConfig& config, const NsfSource& source,
                                 const float* frames, int64_t count, int64_t first,
                                 double f0_before);
// The sum of f0 (Hz) over `count` postnet frames of an NSF voice (f0 restored).
double f0_sum(const VoiceConfig& config, const float* frames, int64_t count);

// What `voxd synth` made.
struct Spoken {
  int64_t utterances = 0;
  int64_t frames = 0;
  int64_t samples = 0;
};

// Speaks each of `utterances` (from the voice's front end) on ctx: Sambert::synthesize, then the
// vocoder over its whole mel (an NSF vocoder with the source of nsf_source(seed, the utterance's
// index)), the audio of each utterance to `sink` in order. An utterance whose every token gets
// 0 frames is skipped (no audio, no index).
Spoken speak(Context& ctx, const Voice& voice, const std::vector<SambertTokens>& utterances,
             uint64_t seed, const std::function<void(const std::vector<float>&)>& sink);

}  // namespace voxd::sambert
