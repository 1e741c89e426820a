// ChatTTS's path from text to audio for one request, as the original's Chat.infer runs it:
// per sentence, the refine-text stage (the GPT writes the text again with ChatTTS's prosody
// tokens) and the audio-code stage (the GPT, prompted with the speaker, makes 4 codes per step),
// the Decoder turning the code stage's hidden states into mel, and Vocos turning mel into 24 kHz
// audio. Sampling is reproducible from a seed. The offline path behind `voxd synth`.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/ops.h"
#include "families/chattts/dvae.h"
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

struct GenerationOptions {
  uint64_t seed = 0;
  // A named speaker, "random" (from spk_stat and the seed) or a spk_emb string. None: for one
  // sentence the original's prompt without a speaker ([empty_spk]); for several, the random
  // speaker of the seed when the voice has spk_stat, so that every sentence has the same voice
  // (the original makes the first sentence's audio the others' prompt, which voxd cannot yet).
  std::optional<std::string> speaker;
  std::optional<float> temperature;  // the code stage's (default: the voice's)
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  bool refine_text = true;  // ChatTTS's skip_refine_text=False
  // Called with each sentence's audio as it is made.
  std::function<void(const std::vector<float>&)> on_audio;
};

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

  // Speaks `text` (see TextFrontEnd for what it accepts). InputError for text with nothing to
  // say, a bad speaker or sampling option, or a prompt past the GPT's positions.
  Generation synthesize(std::string_view text, const GenerationOptions& options) const;

 private:
  // The text stage (one row of text logits per step) or the audio-code stage (num_vq rows).
  enum class Stage { kText, kCode };
  struct Made {
    std::vector<int64_t> text;  // the text stage's tokens (eos not kept)
    int64_t frames = 0;         // the code stage's frames (eos not kept)
    std::vector<float> hidden;  // [frames, hidden]: what produced each frame
    bool ended = false;         // the stage drew its end token (else it reached max_new_token)
  };
  // Runs one stage's GPT generation after `prompt`; `speaker` (normalised) replaces the
  // [spk_emb] position's embedding when given; draws from `seed`.
  Made generate(const std::vector<int64_t>& prompt, Stage kind, const StageConfig& stage,
                const std::vector<float>* speaker, uint64_t seed) const;
  // The prompt `template_text` with {text} replaced by `text_ids` and {prompt}, {txt_smp} by
  // their strings.
  std::vector<int64_t> prompt_ids(const std::string& template_text, const std::string& prompt,
                                  const std::vector<int64_t>& text_ids) const;

  Context& ctx_;
  const Voice& voice_;
};

}  // namespace voxd::chattts
