#include "families/chattts/synthesizer.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace voxd::chattts {

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

std::vector<float> vocode_sentence(Context& ctx, const Voice& voice, std::span<const float> hidden,
                                   int64_t frames) {
  const int64_t size = voice.gpt().config().hidden_size;
  VOXD_CHECK(frames >= 1 && static_cast<int64_t>(hidden.size()) == frames * size,
             "vocode_sentence: hidden states of a wrong size");
  const Tensor states = ops::to_device(
      ctx, Tensor::from_vector({1, frames, size}, std::vector<float>(hidden.begin(), hidden.end())),
      DType::F32);
  return ops::to_host(ctx, voice.vocos().forward(ctx, voice.decoder().decode_hidden(ctx, states)))
      .to_float_vector();
}

Generation Synthesizer::synthesize(
    std::string_view text, const GenerationOptions& options,
    const std::function<void(const std::vector<float>&)>& on_audio) const {
  const Gpt& gpt = voice_.gpt();
  const GptConfig& c = gpt.config();
  RequestGeneration generation(voice_.config(), voice_.front_end(), voice_.speakers(), text,
                               options);
  Generation out;
  std::optional<KvCache> cache;
  Tensor last;  // the hidden state at the stage's last position
  const int64_t window = RequestGeneration::history_window(voice_.config());
  const auto take = [&](const Tensor& hidden) {
    last = ops::contiguous(ctx_, hidden.narrow(1, hidden.size(1) - 1, 1));
    const Tensor logits =
        generation.code_stage() ? gpt.code_logits(ctx_, last) : gpt.text_logits(ctx_, last);
    std::vector<TokenDraw> draws;
    std::vector<int64_t> history;
    generation.next_draws(window, draws, history);
    generation.advance(sample_rows(ctx_, logits, draws, history, window),
                       ops::to_host(ctx_, last).to_float_vector());
  };
  constexpr int64_t kPauseBlock = 4096;
  while (generation.next() != RequestGeneration::Next::kDone) {
    switch (generation.next()) {
      case RequestGeneration::Next::kPrefill: {
        const int64_t length = generation.prefill_length();
        cache = gpt.make_cache(ctx_, 1, generation.capacity());
        Tensor embedded =
            gpt.embed(ctx_, Tensor::from_vector({1, length, c.num_vq}, generation.prefill_ids()),
                      Tensor::from_vector({1, length}, generation.prefill_text_mask()));
        if (const std::vector<float>* speaker = generation.speaker()) {
          Tensor host = ops::to_host(ctx_, embedded);
          for (int64_t t : generation.speaker_positions()) {
            std::copy(speaker->begin(), speaker->end(), host.data<float>() + t * c.hidden_size);
          }
          embedded = ops::to_device(ctx_, host, embedded.dtype());
        }
        take(gpt.forward(ctx_, embedded, *cache));
        break;
      }
      case RequestGeneration::Next::kDecode:
        take(gpt.forward(
            ctx_,
            gpt.embed(ctx_, Tensor::from_vector({1, 1, c.num_vq}, generation.next_ids()),
                      Tensor::from_vector({1, 1},
                                          std::vector<int64_t>{generation.next_is_text() ? 1 : 0})),
            *cache));
        break;
      case RequestGeneration::Next::kVocode: {
        const std::vector<float> audio =
            vocode_sentence(ctx_, voice_, generation.hidden_states(), generation.frames());
        out.samples += static_cast<int64_t>(audio.size());
        if (on_audio && !audio.empty()) on_audio(audio);
        generation.vocoded();
        break;
      }
      case RequestGeneration::Next::kDone:
        break;
    }
    if (generation.sentences_done() > out.sentences) {
      // The sentence is through (vocoded, or without frames): its pause, in blocks.
      out.sentences = generation.sentences_done();
      int64_t silence = generation.pause_samples();
      out.samples += silence;
      for (; silence > 0 && on_audio; silence -= kPauseBlock) {
        on_audio(std::vector<float>(static_cast<size_t>(std::min(silence, kPauseBlock)), 0.0f));
      }
    }
  }
  out.code_frames = generation.code_frames();
  out.truncated = generation.truncated();
  out.drew_speaker = generation.drew_speaker();
  return out;
}

}  // namespace voxd::chattts
