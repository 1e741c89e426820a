#include "families/chattts/synthesizer.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "families/chattts/sampling.h"

namespace voxd::chattts {

namespace {

// A seed of its own for each sentence and stage, so that their draws never repeat each other's.
uint64_t stage_seed(uint64_t seed, size_t sentence, int stage) {
  return seed ^ (0x9e3779b97f4a7c15ULL * (2 * static_cast<uint64_t>(sentence) + stage + 1));
}

void replace_all(std::string& text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
}

}  // namespace

std::unique_ptr<Voice> Voice::load(Context& ctx, const std::string& directory, DType dtype) {
  std::unique_ptr<Voice> voice(new Voice());
  voice->config_ = VoiceConfig::load(directory);
  const VoiceConfig& c = voice->config_;
  Tokenizer tokenizer = Tokenizer::from_file(c.tokenizer_path);
  if (tokenizer.vocab_size() != c.gpt.num_text_tokens) {
    throw InputError(c.tokenizer_path + ": the tokenizer has " +
                     std::to_string(tokenizer.vocab_size()) + " tokens, the GPT's emb_text " +
                     std::to_string(c.gpt.num_text_tokens) + "; they come from different models");
  }
  const auto expect_token = [&](const char* token, int64_t id, const std::string& field) {
    if (tokenizer.require_token_id(token) != id) {
      throw InputError(c.directory + "/config.json: " + field + " is " + std::to_string(id) +
                       " but the tokenizer's " + token + " is " +
                       std::to_string(tokenizer.require_token_id(token)));
    }
  };
  expect_token("[spk_emb]", c.speaker_token, "tokenizer.tokens.[spk_emb]");
  expect_token("[Ebreak]", c.refine_text.sampling.eos, "refine_text.eos");
  expect_token("[break_0]", c.refine_keep_below, "refine_text.keep_below");
  voice->front_end_ = std::make_unique<TextFrontEnd>(std::move(tokenizer), c.language);
  voice->speakers_ = std::make_unique<Speakers>(c);
  voice->gpt_ = Gpt::load(ctx, c.gpt, *SafetensorsFile::open(c.gpt_weights_path),
                          *SafetensorsFile::open(c.embed_weights_path), dtype);
  voice->decoder_ =
      Dvae::load(ctx, c.decoder, *SafetensorsFile::open(c.decoder_weights_path), dtype);
  voice->vocos_ = Vocos::load(ctx, c.vocos, *SafetensorsFile::open(c.vocos_weights_path), dtype);
  return voice;
}

std::vector<int64_t> Synthesizer::prompt_ids(const std::string& template_text,
                                             const std::string& prompt,
                                             const std::vector<int64_t>& text_ids) const {
  const size_t at = template_text.find("{text}");
  VOXD_CHECK(at != std::string::npos, "a ChatTTS prompt template has no {text}");
  const auto fill = [&](std::string part) {
    replace_all(part, "{prompt}", prompt);
    replace_all(part, "{txt_smp}", "");
    const std::vector<int32_t> ids = voice_.front_end().tokenizer().encode(part);
    return std::vector<int64_t>(ids.begin(), ids.end());
  };
  std::vector<int64_t> ids = fill(template_text.substr(0, at));
  ids.insert(ids.end(), text_ids.begin(), text_ids.end());
  const std::vector<int64_t> suffix = fill(template_text.substr(at + 6));
  ids.insert(ids.end(), suffix.begin(), suffix.end());
  return ids;
}

Synthesizer::Made Synthesizer::generate(const std::vector<int64_t>& prompt, Stage kind,
                                        const StageConfig& stage, const std::vector<float>* speaker,
                                        uint64_t seed) const {
  const Gpt& gpt = voice_.gpt();
  const GptConfig& c = gpt.config();
  const int64_t num_vq = c.num_vq;
  const auto length = static_cast<int64_t>(prompt.size());
  VOXD_CHECK(length > 0, "a ChatTTS prompt has no tokens");
  VOXD_CHECK(speaker == nullptr || static_cast<int64_t>(speaker->size()) == c.hidden_size,
             "the speaker vector does not have the GPT's hidden size");
  if (length >= c.max_position_embeddings) {
    throw InputError("a sentence's prompt of " + std::to_string(length) +
                     " tokens does not fit the GPT's " + std::to_string(c.max_position_embeddings) +
                     " positions; split the text into shorter sentences");
  }
  const int64_t capacity = std::min(length + stage.max_new_token, c.max_position_embeddings);
  KvCache cache = gpt.make_cache(ctx_, 1, capacity);

  // The prompt: text positions, each id in every code column as the original expands it.
  std::vector<int64_t> ids;
  ids.reserve(static_cast<size_t>(length * num_vq));
  for (int64_t id : prompt) ids.insert(ids.end(), static_cast<size_t>(num_vq), id);
  Tensor embedded =
      gpt.embed(ctx_, Tensor::from_vector({1, length, num_vq}, ids),
                Tensor::from_vector({1, length}, std::vector<int64_t>(prompt.size(), 1)));
  if (speaker != nullptr) {
    Tensor host = ops::to_host(ctx_, embedded);
    for (int64_t t = 0; t < length; ++t) {
      if (prompt[static_cast<size_t>(t)] != voice_.config().speaker_token) continue;
      std::copy(speaker->begin(), speaker->end(), host.data<float>() + t * c.hidden_size);
    }
    embedded = ops::to_device(ctx_, host, embedded.dtype());
  }
  Tensor hidden = gpt.forward(ctx_, embedded, cache);
  Tensor last = ops::contiguous(ctx_, hidden.narrow(1, length - 1, 1));

  const bool code = kind == Stage::kCode;
  const int64_t rows = code ? num_vq : 1;
  std::vector<std::vector<int64_t>> history(static_cast<size_t>(rows));
  Made made;
  std::vector<float> probs;
  for (int64_t step = 0; step < stage.max_new_token; ++step) {
    // Every head's logits in one copy: [rows, vocabulary].
    const std::vector<float> logits =
        ops::to_host(ctx_, code ? gpt.code_logits(ctx_, last) : gpt.text_logits(ctx_, last))
            .to_float_vector();
    const size_t vocabulary = logits.size() / static_cast<size_t>(rows);
    std::vector<int64_t> picked(static_cast<size_t>(rows));
    bool ended = false;
    for (int64_t r = 0; r < rows; ++r) {
      const auto begin = logits.begin() + static_cast<std::ptrdiff_t>(r * vocabulary);
      std::vector<float> row(begin, begin + static_cast<std::ptrdiff_t>(vocabulary));
      process_logits(row, stage.temperature, history[static_cast<size_t>(r)], step, stage.sampling);
      probs.resize(row.size());
      softmax(row, probs);
      const int64_t token = draw_token(
          probs, uniform_draw(seed, static_cast<uint64_t>(step), static_cast<uint64_t>(r)));
      picked[static_cast<size_t>(r)] = token;
      ended = ended || token == stage.sampling.eos;
    }
    if (ended) {
      made.ended = true;
      break;
    }
    if (code) {
      ++made.frames;
      const std::vector<float> produced = ops::to_host(ctx_, last).to_float_vector();
      made.hidden.insert(made.hidden.end(), produced.begin(), produced.end());
    } else {
      made.text.push_back(picked[0]);
    }
    for (int64_t r = 0; r < rows; ++r) {
      history[static_cast<size_t>(r)].push_back(picked[static_cast<size_t>(r)]);
    }
    if (step + 1 == stage.max_new_token || cache.lengths[0] >= capacity) break;
    std::vector<int64_t> next =
        code ? picked : std::vector<int64_t>(static_cast<size_t>(num_vq), picked[0]);
    last = gpt.forward(ctx_,
                       gpt.embed(ctx_, Tensor::from_vector({1, 1, num_vq}, next),
                                 Tensor::from_vector({1, 1}, std::vector<int64_t>{code ? 0 : 1})),
                       cache);
  }
  return made;
}

Generation Synthesizer::synthesize(std::string_view text, const GenerationOptions& options) const {
  const VoiceConfig& config = voice_.config();
  const GptConfig& gpt = voice_.gpt().config();
  const auto positive = [](std::optional<double> value) {
    return !value || (std::isfinite(*value) && *value > 0.0);
  };
  if (!positive(options.temperature) || !positive(options.top_p) ||
      (options.top_p && *options.top_p > 1.0) || (options.top_k && *options.top_k < 1)) {
    throw InputError("sampling: temperature must be > 0, top_p in (0, 1] and top_k >= 1");
  }
  const text::Analysis analysis = voice_.front_end().analyze(text);
  Generation out;
  std::optional<std::string> speaker_name = options.speaker;
  if (!speaker_name && analysis.sentences.size() > 1 && config.spk_stat) {
    speaker_name = kRandomSpeaker;
    out.drew_speaker = true;
  }
  std::optional<std::vector<float>> speaker;
  if (speaker_name) {
    speaker =
        normalize_speaker(voice_.speakers().resolve(*speaker_name, options.seed, gpt.hidden_size));
  }

  StageConfig refine = config.refine_text;
  StageConfig code = config.infer_code;
  if (options.temperature) code.temperature = *options.temperature;
  if (options.top_p) code.sampling.top_p = options.top_p;
  if (options.top_k) code.sampling.top_k = options.top_k;
  // An end token at the first step would leave a sentence without audio (the original draws
  // again; voxd's draws are seeded, so it would be missing every time): at least one token.
  refine.sampling.min_new_token = std::max<int64_t>(refine.sampling.min_new_token, 1);
  code.sampling.min_new_token = std::max<int64_t>(code.sampling.min_new_token, 1);
  const TextFrontEnd& front_end = voice_.front_end();

  for (size_t s = 0; s < analysis.sentences.size(); ++s) {
    const text::Sentence& sentence = analysis.sentences[s];
    std::vector<int64_t> text_ids = sentence.ids;
    if (options.refine_text) {
      const Made refined = generate(
          prompt_ids(config.refine_text.prompt_template, config.refine_text.prompt, text_ids),
          Stage::kText, refine, nullptr, stage_seed(options.seed, s, 0));
      std::vector<int64_t> kept;
      for (int64_t id : refined.text) {
        if (id < config.refine_keep_below && !front_end.prompt_only(id)) kept.push_back(id);
      }
      // A refinement that ran to max_new_token, or kept nothing, gives the text back as it was.
      if (refined.ended && !kept.empty()) text_ids = std::move(kept);
    }
    const std::string& code_template =
        speaker ? config.infer_code.prompt_template : config.infer_code_template_without_speaker;
    const Made made =
        generate(prompt_ids(code_template, config.infer_code.prompt, text_ids), Stage::kCode, code,
                 speaker ? &*speaker : nullptr, stage_seed(options.seed, s, 1));
    ++out.sentences;
    out.code_frames += made.frames;
    if (!made.ended) ++out.truncated;
    std::vector<float> audio;
    if (made.frames > 0) {
      const Tensor hidden = ops::to_device(
          ctx_, Tensor::from_vector({1, made.frames, gpt.hidden_size}, made.hidden), DType::F32);
      const Tensor mel = voice_.decoder().decode_hidden(ctx_, hidden);
      audio = ops::to_host(ctx_, voice_.vocos().forward(ctx_, mel)).to_float_vector();
    }
    out.samples += static_cast<int64_t>(audio.size());
    if (options.on_audio && !audio.empty()) options.on_audio(audio);
    // The pause (at most text::kMaxBreakMs) in blocks, as the audio of its own.
    int64_t silence = static_cast<int64_t>(sentence.pause_after_ms) * config.sample_rate / 1000;
    out.samples += silence;
    constexpr int64_t kBlock = 4096;
    for (; silence > 0 && options.on_audio; silence -= kBlock) {
      options.on_audio(std::vector<float>(static_cast<size_t>(std::min(silence, kBlock)), 0.0f));
    }
  }
  return out;
}

}  // namespace voxd::chattts
