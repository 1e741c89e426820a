#include "families/chattts/voice_config.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/config_fields.h"
#include "core/error.h"
#include "core/voice_directory.h"

namespace voxd::chattts {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string existing_file(const fs::path& directory, const json& section, const std::string& key,
                          const std::string& where) {
  return voice_file(directory.string(), config::string(section, key, where), where);
}

StageConfig read_stage(const json& root, const std::string& key, const std::string& template_key,
                       const json& sampling, const std::string& where) {
  const json& j = config::require(root, key, where);
  const std::string at = where + ": " + key;
  StageConfig stage;
  stage.prompt = config::string(j, "prompt", at);
  stage.prompt_template =
      config::string(config::require(root, "prompts", where), template_key, where + ": prompts");
  if (stage.prompt_template.find("{text}") == std::string::npos) {
    throw InputError(where + ": prompts: field '" + template_key + "' must contain {text}");
  }
  stage.temperature = static_cast<float>(config::positive_number(j, "temperature", at));
  stage.max_new_token = config::positive_int(j, "max_new_token", at);
  SamplingParams& s = stage.sampling;
  s.repetition_penalty = static_cast<float>(config::positive_number(j, "repetition_penalty", at));
  if (!j.contains("top_P") || !j.at("top_P").is_null()) {
    s.top_p = config::positive_number(j, "top_P", at);
  }
  if (!j.contains("top_K") || !j.at("top_K").is_null())
    s.top_k = config::positive_int(j, "top_K", at);
  s.eos = config::non_negative_int(j, "eos", at);
  s.min_new_token = config::non_negative_int(j, "min_new_token", at);
  s.repetition_window = config::positive_int(sampling, "repetition_window", where + ": sampling");
  s.min_tokens_to_keep = config::positive_int(sampling, "min_tokens_to_keep", where + ": sampling");
  return stage;
}

}  // namespace

VoiceConfig VoiceConfig::load(const std::string& directory) {
  const VoiceConfigFile file = read_voice_config(directory);
  const fs::path dir(file.directory);
  const std::string& where = file.path;
  const json& root = file.root;
  if (voice_family_type(file, "") != kChatTtsType) {
    throw InputError(where + ": field 'type' must be \"chattts\" for a ChatTTS voice");
  }
  VoiceConfig c;
  c.directory = file.directory;
  c.name = root.contains("name") ? config::string(root, "name", where) : dir.filename().string();
  c.language = root.contains("language") ? config::string(root, "language", where) : "zh";
  c.sample_rate = config::positive_int(root, "sample_rate", where);
  c.hop_length = config::positive_int(root, "hop_length", where);
  c.n_mels = config::positive_int(root, "n_mels", where);

  const json& tokenizer = config::require(root, "tokenizer", where);
  c.tokenizer_path = existing_file(dir, tokenizer, "file", where + ": tokenizer");
  const json& gpt = config::require(root, "gpt", where);
  c.gpt = GptConfig::from_json(gpt, where + ": gpt");
  c.gpt_weights_path = existing_file(dir, gpt, "weights", where + ": gpt");
  c.embed_weights_path = existing_file(dir, gpt, "embed_weights", where + ": gpt");

  const json& decoder = config::require(root, "decoder", where);
  c.decoder = DvaeConfig::from_json(decoder, where + ": decoder", /*flat=*/true);
  c.decoder.n_mels = c.n_mels;
  c.decoder_weights_path = existing_file(dir, decoder, "weights", where + ": decoder");
  if (2 * c.decoder.decoder.idim != c.gpt.hidden_size) {
    throw InputError(where + ": decoder: field 'idim' must be half the GPT's hidden_size (" +
                     std::to_string(c.gpt.hidden_size / 2) + ")");
  }
  if (root.contains("dvae") && !root.at("dvae").is_null()) {
    const json& dvae = root.at("dvae");
    c.dvae = DvaeConfig::from_json(dvae, where + ": dvae", /*flat=*/false);
    c.dvae->n_mels = c.n_mels;
    c.dvae_weights_path = existing_file(dir, dvae, "weights", where + ": dvae");
  }
  const json& vocos = config::require(root, "vocos", where);
  c.vocos = VocosConfig::from_json(vocos, where + ": vocos");
  c.vocos_weights_path = existing_file(dir, vocos, "weights", where + ": vocos");
  if (c.vocos.input_channels != c.n_mels || c.vocos.hop_length != c.hop_length) {
    throw InputError(where + ": vocos: input_channels and hop_length must be n_mels (" +
                     std::to_string(c.n_mels) + ") and hop_length (" +
                     std::to_string(c.hop_length) + ")");
  }

  const json& sampling = config::require(root, "sampling", where);
  c.refine_text = read_stage(root, "refine_text", "refine_text", sampling, where);
  c.refine_keep_below = config::positive_int(config::require(root, "refine_text", where),
                                             "keep_below", where + ": refine_text");
  c.infer_code = read_stage(root, "infer_code", "infer_code", sampling, where);
  c.infer_code_template_without_speaker = config::string(
      config::require(root, "prompts", where), "infer_code_without_speaker", where + ": prompts");
  if (c.infer_code_template_without_speaker.find("{text}") == std::string::npos ||
      c.infer_code.prompt_template.find("[spk_emb]") == std::string::npos) {
    throw InputError(where +
                     ": prompts: 'infer_code' must hold [spk_emb] and {text}, "
                     "'infer_code_without_speaker' {text}");
  }
  if (c.refine_text.sampling.eos >= c.gpt.num_text_tokens ||
      c.infer_code.sampling.eos >= c.gpt.num_audio_tokens) {
    throw InputError(where +
                     ": refine_text.eos must be a text token and infer_code.eos an audio "
                     "token");
  }
  const json& tokens = config::require(tokenizer, "tokens", where + ": tokenizer");
  c.speaker_token = config::non_negative_int(tokens, "[spk_emb]", where + ": tokenizer.tokens");

  if (root.contains("speaker") && !root.at("speaker").is_null()) {
    const json& speaker = root.at("speaker");
    const std::string at = where + ": speaker";
    c.speaker_weights_path = existing_file(dir, speaker, "weights", at);
    if (speaker.contains("spk_stat") && !speaker.at("spk_stat").is_null()) {
      const json& stat = speaker.at("spk_stat");
      c.spk_stat = std::make_pair(config::string(stat, "mean", at + ".spk_stat"),
                                  config::string(stat, "std", at + ".spk_stat"));
    }
    if (speaker.contains("named")) {
      const json& named = speaker.at("named");
      if (!named.is_object()) throw InputError(at + ": field 'named' must be an object");
      for (const auto& [name, tensor] : named.items()) {
        if (!tensor.is_string()) {
          throw InputError(at + ": speaker '" + name + "' must name a tensor");
        }
        c.speakers[name] = tensor.get<std::string>();
      }
    }
  }
  return c;
}

}  // namespace voxd::chattts
