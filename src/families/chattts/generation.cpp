#include "families/chattts/generation.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "families/chattts/sampling.h"
#include "scheduler/family.h"

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

RequestGeneration::RequestGeneration(const VoiceConfig& config, const TextFrontEnd& front_end,
                                     const Speakers& speakers, std::string_view text,
                                     const GenerationOptions& options)
    : config_(config), front_end_(front_end), options_(options) {
  const auto positive = [](std::optional<double> value) {
    return !value || (std::isfinite(*value) && *value > 0.0);
  };
  if (!positive(options.temperature) || !positive(options.top_p) ||
      (options.top_p && *options.top_p > 1.0) || (options.top_k && *options.top_k < 1)) {
    throw InputError("sampling: temperature must be > 0, top_p in (0, 1] and top_k >= 1");
  }
  sentences_ = front_end.analyze(text).sentences;
  std::optional<std::string> speaker_name = options.speaker;
  if (!speaker_name && sentences_.size() > 1 && config.spk_stat) {
    speaker_name = kRandomSpeaker;
    drew_speaker_ = true;
  }
  if (speaker_name) {
    try {
      speaker_ =
          normalize_speaker(speakers.resolve(*speaker_name, options.seed, config.gpt.hidden_size));
    } catch (const InputError& e) {
      throw scheduler::OptionError(e.what(), "speaker");
    }
  }
  refine_ = config.refine_text;
  code_ = config.infer_code;
  if (options.temperature) {
    code_.temperature =
        static_cast<float>(std::max(*options.temperature, double{kLeastTemperature}));
  }
  if (options.top_p) code_.sampling.top_p = options.top_p;
  if (options.top_k) code_.sampling.top_k = options.top_k;
  // An end token at the first step would leave a sentence without audio (the original draws
  // again; voxd's draws are seeded, so it would be missing every time): at least one token.
  refine_.sampling.min_new_token = std::max<int64_t>(refine_.sampling.min_new_token, 1);
  code_.sampling.min_new_token = std::max<int64_t>(code_.sampling.min_new_token, 1);
  code_template_ = template_of(true);
  refine_template_ = template_of(false);
  // Every sentence's prompts must fit the GPT now, not after the sentences before it have played:
  // the refine stage's, and the code stage's on the longest text it can be given.
  for (size_t s = 0; s < sentences_.size(); ++s) {
    const auto text = static_cast<int64_t>(sentences_[s].ids.size());
    check_prompt(true, static_cast<size_t>(longest_code_text(text)), s);
    if (options_.refine_text) check_prompt(false, sentences_[s].ids.size(), s);
  }
  // From the last sentence back: the first widest of each sentence and those after it.
  widest_from_.resize(sentences_.size());
  for (size_t s = sentences_.size(); s-- > 0;) {
    const Widest here{.sentence = s,
                      .positions = most_positions(static_cast<int64_t>(sentences_[s].ids.size()))};
    widest_from_[s] = s + 1 < sentences_.size() && widest_from_[s + 1].positions > here.positions
                          ? widest_from_[s + 1]
                          : here;
  }
  start_sentence();
}

void RequestGeneration::start_sentence() {
  if (sentence_ >= sentences_.size()) {
    next_ = Next::kDone;
    return;
  }
  hidden_.clear();
  frames_ = 0;
  if (options_.refine_text) {
    start_stage(false, sentences_[sentence_].ids);
  } else {
    start_stage(true, sentences_[sentence_].ids);
  }
}

RequestGeneration::PromptTemplate RequestGeneration::template_of(bool code) const {
  const StageConfig& stage = code ? code_ : refine_;
  const std::string& template_text =
      !code ? stage.prompt_template
            : (speaker_ ? stage.prompt_template : config_.infer_code_template_without_speaker);
  const size_t at = template_text.find("{text}");
  VOXD_CHECK(at != std::string::npos, "a ChatTTS prompt template has no {text}");
  const auto fill = [&](std::string part) {
    replace_all(part, "{prompt}", stage.prompt);
    replace_all(part, "{txt_smp}", "");
    const std::vector<int32_t> ids = front_end_.tokenizer().encode(part);
    return std::vector<int64_t>(ids.begin(), ids.end());
  };
  return {fill(template_text.substr(0, at)), fill(template_text.substr(at + 6))};
}

void RequestGeneration::check_prompt(bool code, size_t text_tokens, size_t sentence) const {
  const PromptTemplate& around = code ? code_template_ : refine_template_;
  const auto length =
      static_cast<int64_t>(around.before.size() + text_tokens + around.after.size());
  const int64_t positions = config_.gpt.max_position_embeddings;
  VOXD_CHECK(length > 0, "a ChatTTS prompt has no tokens");
  if (length >= positions) {
    throw InputTooLongError("sentence " + std::to_string(sentence + 1) + "'s " +
                            (code ? "code" : "refine") + " prompt of " + std::to_string(length) +
                            " tokens does not fit the GPT's " + std::to_string(positions) +
                            " positions; split the text into shorter sentences");
  }
}

int64_t RequestGeneration::longest_code_text(int64_t text_tokens) const {
  // A refined text is kept only when the stage drew its end token: fewer than max_new_token.
  const int64_t refined = std::max<int64_t>(refine_.max_new_token - 1, 0);
  return options_.refine_text ? std::max(text_tokens, refined) : text_tokens;
}

int64_t RequestGeneration::most_positions(int64_t text_tokens) const {
  const auto stage = [&](bool code, int64_t text) {
    const PromptTemplate& around = code ? code_template_ : refine_template_;
    const int64_t prompt = static_cast<int64_t>(around.before.size() + around.after.size()) + text;
    return std::min(prompt + (code ? code_ : refine_).max_new_token,
                    config_.gpt.max_position_embeddings);
  };
  const int64_t code = stage(true, longest_code_text(text_tokens));
  return options_.refine_text ? std::max(code, stage(false, text_tokens)) : code;
}

RequestGeneration::Widest RequestGeneration::widest_sentence() const {
  return sentence_ < widest_from_.size() ? widest_from_[sentence_] : Widest{.sentence = sentence_};
}

void RequestGeneration::start_stage(bool code, const std::vector<int64_t>& text_ids) {
  code_stage_ = code;
  const StageConfig& stage = code ? code_ : refine_;
  check_prompt(code, text_ids.size(), sentence_);
  const PromptTemplate& around = code ? code_template_ : refine_template_;
  prompt_ = around.before;
  prompt_.insert(prompt_.end(), text_ids.begin(), text_ids.end());
  prompt_.insert(prompt_.end(), around.after.begin(), around.after.end());
  const GptConfig& gpt = config_.gpt;
  const auto length = static_cast<int64_t>(prompt_.size());
  capacity_ = std::min(length + stage.max_new_token, gpt.max_position_embeddings);
  positions_ = 0;
  prefilled_ = 0;
  recomputing_ = false;
  step_ = 0;
  history_.assign(static_cast<size_t>(code ? gpt.num_vq : 1), {});
  if (!code) refined_.clear();
  next_ = Next::kPrefill;
}

uint64_t RequestGeneration::seed_of_stage() const {
  return stage_seed(options_.seed, sentence_, code_stage_ ? 1 : 0);
}

void RequestGeneration::next_draws(int64_t window, std::vector<TokenDraw>& draws,
                                   std::vector<int64_t>& history) const {
  VOXD_CHECK(next_ == Next::kPrefill || next_ == Next::kDecode,
             "next_draws() called when the stream wants no GPT step");
  const StageConfig& stage = code_stage_ ? code_ : refine_;
  VOXD_CHECK(window >= stage.sampling.repetition_window,
             "next_draws(): a history window narrower than the stage's penalty counts");
  for (size_t r = 0; r < history_.size(); ++r) {
    draws.push_back(token_draw(stage.sampling, stage.temperature, step_, seed_of_stage(), r));
    std::vector<int64_t> recent = recent_tokens(history_[r], stage.sampling.repetition_window);
    history.insert(history.end(), static_cast<size_t>(window) - recent.size(), -1);
    history.insert(history.end(), recent.begin(), recent.end());
  }
}

int64_t RequestGeneration::history_window(const VoiceConfig& config) {
  return std::max(config.refine_text.sampling.repetition_window,
                  config.infer_code.sampling.repetition_window);
}

void RequestGeneration::advance(std::span<const int64_t> tokens, std::span<const float> hidden) {
  VOXD_CHECK(next_ == Next::kPrefill || next_ == Next::kDecode,
             "advance() called when the stream wants no GPT step");
  const GptConfig& gpt = config_.gpt;
  const StageConfig& stage = code_stage_ ? code_ : refine_;
  const size_t rows = history_.size();
  VOXD_CHECK(tokens.size() == rows, "advance(): tokens for a wrong number of rows");
  VOXD_CHECK(static_cast<int64_t>(hidden.size()) == gpt.hidden_size,
             "advance(): a hidden state of a wrong size");
  if (std::find(tokens.begin(), tokens.end(), -1) != tokens.end()) {
    throw Error("chattts: the GPT's logits at step " + std::to_string(step_) + " of sentence " +
                std::to_string(sentence_ + 1) + "'s " + (code_stage_ ? "code" : "refine-text") +
                " stage drew no token (NaN logits, or every token removed)");
  }
  positions_ = next_ == Next::kPrefill ? prefill_length() : positions_ + 1;
  prefilled_ = 0;
  recomputing_ = false;
  const std::vector<int64_t> picked(tokens.begin(), tokens.end());
  const bool ended = std::find(picked.begin(), picked.end(), stage.sampling.eos) != picked.end();
  if (ended) {
    end_stage(true);
    return;
  }
  if (code_stage_) {
    ++frames_;
    hidden_.insert(hidden_.end(), hidden.begin(), hidden.end());
  } else {
    refined_.push_back(picked[0]);
  }
  for (size_t r = 0; r < rows; ++r) history_[r].push_back(picked[r]);
  ++step_;
  if (step_ == stage.max_new_token || positions_ >= capacity_) {
    end_stage(false);
    return;
  }
  next_ids_ =
      code_stage_ ? picked : std::vector<int64_t>(static_cast<size_t>(gpt.num_vq), picked[0]);
  next_ = Next::kDecode;
}

void RequestGeneration::end_stage(bool ended) {
  if (!code_stage_) {
    std::vector<int64_t> kept;
    for (int64_t id : refined_) {
      if (id < config_.refine_keep_below && !front_end_.prompt_only(id)) kept.push_back(id);
    }
    // A refinement that ran to max_new_token, or kept nothing, gives the text back as it was.
    start_stage(true, ended && !kept.empty() ? kept : sentences_[sentence_].ids);
    return;
  }
  code_frames_total_ += frames_;
  if (!ended) ++truncated_;
  pause_samples_ = 0;
  if (frames_ > 0) {
    next_ = Next::kVocode;
    return;
  }
  vocoded();
}

int64_t RequestGeneration::prefill_length() const {
  // After a preemption: the prompt, the tokens fed since and the one to feed next (all drawn).
  return static_cast<int64_t>(prompt_.size()) +
         (recomputing_ ? static_cast<int64_t>(history_.front().size()) : 0);
}

std::vector<int64_t> RequestGeneration::prefill_ids(int64_t begin, int64_t end) const {
  VOXD_CHECK(0 <= begin && begin <= end && end <= prefill_length(),
             "prefill_ids() of positions outside the prefill");
  const auto num_vq = static_cast<size_t>(config_.gpt.num_vq);
  const auto prompt = static_cast<int64_t>(prompt_.size());
  std::vector<int64_t> ids;
  ids.reserve(static_cast<size_t>(end - begin) * num_vq);
  for (int64_t p = begin; p < end; ++p) {
    if (p < prompt) {
      ids.insert(ids.end(), num_vq, prompt_[static_cast<size_t>(p)]);
      continue;
    }
    // A drawn token (only after preempt()): the code stage's num_vq codes, or the refine
    // stage's one token repeated.
    const auto step = static_cast<size_t>(p - prompt);
    for (size_t column = 0; column < num_vq; ++column) {
      ids.push_back(history_[code_stage_ ? column : 0][step]);
    }
  }
  return ids;
}

std::vector<int64_t> RequestGeneration::prefill_text_mask(int64_t begin, int64_t end) const {
  VOXD_CHECK(0 <= begin && begin <= end && end <= prefill_length(),
             "prefill_text_mask() of positions outside the prefill");
  std::vector<int64_t> mask;
  mask.reserve(static_cast<size_t>(end - begin));
  const auto prompt = static_cast<int64_t>(prompt_.size());
  for (int64_t p = begin; p < end; ++p) mask.push_back(!code_stage_ || p < prompt ? 1 : 0);
  return mask;
}

std::vector<int64_t> RequestGeneration::speaker_positions() const {
  std::vector<int64_t> at;
  if (speaker() == nullptr) return at;
  for (size_t p = 0; p < prompt_.size(); ++p) {
    if (prompt_[p] == config_.speaker_token) at.push_back(static_cast<int64_t>(p));
  }
  return at;
}

void RequestGeneration::prefilled_to(int64_t end) {
  VOXD_CHECK(next_ == Next::kPrefill, "prefilled_to() called when the stream wants no prefill");
  VOXD_CHECK(end > prefilled_ && end < prefill_length(),
             "prefilled_to(): a piece that ends before it starts or at the prefill's end");
  prefilled_ = end;
}

void RequestGeneration::preempt() {
  VOXD_CHECK(next_ == Next::kDecode, "preempt() called when the stream is not decoding");
  next_ = Next::kPrefill;
  recomputing_ = true;
}

void RequestGeneration::vocoded() {
  // The pause (at most text::kMaxBreakMs) after the sentence.
  pause_samples_ =
      static_cast<int64_t>(sentences_[sentence_].pause_after_ms) * config_.sample_rate / 1000;
  ++sentences_done_;
  ++sentence_;
  start_sentence();
}

}  // namespace voxd::chattts
