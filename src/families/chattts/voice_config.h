// A ChatTTS voice directory's config.json ("type": "chattts", docs/voice-format.md): where the
// weights and the tokenizer are, the networks' sizes, the two generation stages' settings and
// prompts, the control tokens' ids, and the speakers.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "families/chattts/model_config.h"
#include "families/chattts/sampling.h"

namespace voxd::chattts {

inline constexpr const char* kChatTtsType = "chattts";

// One generation stage (the original's RefineTextParams or InferCodeParams).
struct StageConfig {
  std::string prompt;  // "[speed_5]" for the code stage, "" for refinement
  std::string prompt_template;
  float temperature = 0.3f;
  int64_t max_new_token = 2048;
  SamplingParams sampling;  // eos, top-P/K, penalty, min_new_token, window, min keep
};

struct VoiceConfig {
  std::string directory;
  std::string name;
  std::string language;
  int64_t sample_rate = 24000;
  int64_t hop_length = 256;
  int64_t n_mels = 100;

  std::string tokenizer_path;
  GptConfig gpt;
  std::string gpt_weights_path;
  std::string embed_weights_path;
  DvaeConfig decoder;
  std::string decoder_weights_path;
  std::optional<DvaeConfig> dvae;
  std::string dvae_weights_path;
  VocosConfig vocos;
  std::string vocos_weights_path;

  StageConfig refine_text;
  int64_t refine_keep_below = 0;  // refinement keeps only text ids below this ([break_0])
  StageConfig infer_code;
  // The code stage's prompt when the request names no speaker ([empty_spk] instead of
  // [spk_emb]).
  std::string infer_code_template_without_speaker;
  int64_t speaker_token = 0;  // [spk_emb]'s id

  // Speakers: spk_stat (mean and std tensor names) for random speakers, named ones, in
  // speaker_weights_path; none when the voice has no speaker data.
  std::string speaker_weights_path;
  std::optional<std::pair<std::string, std::string>> spk_stat;  // (mean, std) tensor names
  std::map<std::string, std::string> speakers;                  // name -> tensor name

  // Reads `directory`/config.json. Throws voxd::InputError naming the file and the field for a
  // missing or malformed field, a missing file, or sizes that do not fit together.
  static VoiceConfig load(const std::string& directory);
};

}  // namespace voxd::chattts
