// ChatTTS's path from text to audio for one request, offline (`voxd synth`): a RequestGeneration
// (generation.h: the refine-text and audio-code stages, sampling reproducible from a seed) run
// one stream alone through the GPT with a contiguous KV cache, the Decoder turning the code
// stage's hidden states into mel, and Vocos turning mel into 24 kHz audio.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/ops.h"
#include "families/chattts/dvae.h"
#include "families/chattts/generation.h"
#include "families/chattts/gpt.h"
#include "families/chattts/speaker.h"
#include "families/chattts/text_front_end.h"
#include "families/chattts/vocos.h"
#include "families/chattts/voice_config.h"

namespace voxd::chattts {

// A ChatTTS voice's config, front end, speakers and networks on one device.
class Voice {
 public:
  // Reads `directory` and loads the networks onto ctx's device in `dtype`. Errors name the file
  // and the field or tensor.
  static std::unique_ptr<Voice> load(Context& ctx, const std::string& directory,
                                     DType dtype = DType::F32);

  const VoiceConfig& config() const { return config_; }
  const TextFrontEnd& front_end() const { return *front_end_; }
  const Speakers& speakers() const { return *speakers_; }
  const Gpt& gpt() const { return gpt_; }
  const Dvae& decoder() const { return decoder_; }
  const Vocos& vocos() const { return vocos_; }

 private:
  Voice() = default;
  VoiceConfig config_;
  std::unique_ptr<TextFrontEnd> front_end_;
  std::unique_ptr<Speakers> speakers_;
  Gpt gpt_;
  Dvae decoder_;
  Vocos vocos_;
};

// The Decoder and Vocos over a sentence's hidden states (host [frames, hidden], frames ≥ 1) in
// one piece on ctx: its audio (what streaming in chunks, code_chunker.h, must equal).
std::vector<float> vocode_sentence(Context& ctx, const Voice& voice, std::span<const float> hidden,
                                   int64_t frames);

struct Generation {
  int64_t sentences = 0;
  int64_t code_frames = 0;  // GPT steps of the code stage, all sentences
  int64_t samples = 0;
  // Sentences whose code stage reached max_new_token without its end token (their audio is
  // cut there), and whether the speaker was drawn for want of one (GenerationOptions::speaker).
  int64_t truncated = 0;
  bool drew_speaker = false;
};

class Synthesizer {
 public:
  // ctx's backend and allocator and `voice` must outlive this.
  Synthesizer(Context& ctx, const Voice& voice) : ctx_(ctx), voice_(voice) {}

  // Speaks `text` (see TextFrontEnd for what it accepts), one RequestGeneration step at a time
  // with a KV cache per stage, giving each sentence's audio and then its pause to `on_audio` as
  // they are made. InputError for text with nothing to say, a bad speaker or sampling option, or
  // a prompt past the GPT's positions.
  Generation synthesize(std::string_view text, const GenerationOptions& options,
                        const std::function<void(const std::vector<float>&)>& on_audio) const;

 private:
  Context& ctx_;
  const Voice& voice_;
};

}  // namespace voxd::chattts
