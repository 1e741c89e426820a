// One request's way through ChatTTS (the original's Chat.infer) as a state machine that GPT
// forwards advance one at a time, so that the offline loop (Synthesizer) and batched steps run
// the same logic: per sentence, the refine-text stage (unless skipped: the GPT writes the text
// again with ChatTTS's prosody tokens), the audio-code stage (the GPT, prompted with the speaker,
// makes num_vq codes per step), then the code stage's hidden states for the Decoder and Vocos,
// and the sentence's pause. Whoever runs the GPT keeps the KV cache: a stage starts from an empty
// one at its prompt, and each step appends one position.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/token_sampling.h"
#include "families/chattts/speaker.h"
#include "families/chattts/text_front_end.h"
#include "families/chattts/voice_config.h"

namespace voxd::chattts {

// The least sampling temperature a request's takes effect as: a smaller one (a denormal float is
// still > 0) would make the logits over it infinite, and no token could be drawn. At 0.001 the
// draw is in effect greedy already.
inline constexpr float kLeastTemperature = 1e-3f;

struct GenerationOptions {
  uint64_t seed = 0;
  // A named speaker, "random" (from spk_stat and the seed) or a spk_emb string. None: for one
  // sentence the original's prompt without a speaker ([empty_spk]); for several, the random
  // speaker of the seed when the voice has spk_stat, so that every sentence has the same voice
  // (the original makes the first sentence's audio the others' prompt, which voxd cannot yet).
  std::optional<std::string> speaker;
  // The code stage's (default: the voice's), as asked (a double: a tiny one is not 0 yet); below
  // kLeastTemperature it samples as that.
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  bool refine_text = true;  // ChatTTS's skip_refine_text=False
};

class RequestGeneration {
 public:
  // What the stream needs next.
  enum class Next {
    kPrefill,  // a stage's positions through the GPT, from an empty cache (prefill_ids())
    kDecode,   // one more position (next_ids()) after `positions()` cached ones
    kVocode,   // a sentence's hidden states to audio (hidden_states()), then vocoded()
    kDone,
  };

  // Splits `text` into sentences and resolves the speaker. InputError for text with nothing to
  // say or a bad sampling option; scheduler::OptionError (field "speaker") for a bad speaker.
  // `config`, `front_end` and `speakers` must outlive it.
  RequestGeneration(const VoiceConfig& config, const TextFrontEnd& front_end,
                    const Speakers& speakers, std::string_view text,
                    const GenerationOptions& options);

  Next next() const { return next_; }

  // The stage's prompt ids (every position a text position).
  const std::vector<int64_t>& prompt() const { return prompt_; }
  // kPrefill: the positions to run, [prefill_length()][num_vq] ids flattened (a text position's
  // id repeated in every column) and whether each is a text position: the prompt, and after
  // preempt() also the tokens the stage had drawn, so that the prefill's last logits are those
  // its next decode step would have given.
  int64_t prefill_length() const;
  // Positions [begin, end) of them (0 ≤ begin ≤ end ≤ prefill_length(): a piece of a prefill run
  // in pieces), or all.
  std::vector<int64_t> prefill_ids(int64_t begin, int64_t end) const;
  std::vector<int64_t> prefill_ids() const { return prefill_ids(0, prefill_length()); }
  std::vector<int64_t> prefill_text_mask(int64_t begin, int64_t end) const;
  std::vector<int64_t> prefill_text_mask() const { return prefill_text_mask(0, prefill_length()); }
  // kPrefill: the speaker vector that replaces the embedding at speaker_positions() (the
  // prompt's [spk_emb] positions; none without a speaker, or in the refine stage).
  const std::vector<float>* speaker() const { return code_stage_ ? speaker_ptr() : nullptr; }
  std::vector<int64_t> speaker_positions() const;
  // kPrefill: the positions of the prefill already in the stage's cache, where the next piece
  // of a prefill run in pieces starts (GptKind's, of at most its prefill_chunk_tokens); 0 before
  // the first piece.
  int64_t prefilled() const { return prefilled_; }
  // kPrefill: positions [prefilled(), end) went through the GPT into the cache, `end` short of
  // prefill_length(): the next piece starts at `end` (the last piece is advance()'s, which draws
  // from its last position's logits).
  void prefilled_to(int64_t end);
  // Positions the stage's cache holds (its prompt and the tokens fed since).
  int64_t positions() const { return positions_; }
  // The most positions the stage's cache can need: its prompt and max_new_token, within the
  // GPT's positions.
  int64_t capacity() const { return capacity_; }
  // The most positions a stage of a sentence of `text_tokens` tokens can need (its capacity()):
  // the refine stage's, and the code stage's on the longest text refining can give back (or
  // the sentence's own).
  int64_t most_positions(int64_t text_tokens) const;
  // Of the sentences from the one being spoken on, the first whose stages can need the most
  // positions (most_positions of its text), and how many.
  struct Widest {
    size_t sentence = 0;
    int64_t positions = 0;
  };
  Widest widest_sentence() const;
  // kDecode: the num_vq ids of the position to feed (a text token repeated in every column, or
  // the code stage's num_vq codes) and whether it is a text position.
  const std::vector<int64_t>& next_ids() const { return next_ids_; }
  bool next_is_text() const { return !code_stage_; }
  // Whether the stage reads the code heads (else the text head).
  bool code_stage() const { return code_stage_; }

  // kPrefill or kDecode: how the next token is drawn from the logits at the stage's last
  // position, one row per head row (the code stage's num_vq, the refine stage's one): each row's
  // draw (its settings, its seed and step) appended to `draws`, and its last `window` tokens (−1
  // in front where fewer; window >= history_window()) to `history`, for ops::sample_tokens.
  void next_draws(int64_t window, std::vector<TokenDraw>& draws,
                  std::vector<int64_t>& history) const;
  // The most recent tokens a stage's penalty counts, over both stages of `config`.
  static int64_t history_window(const VoiceConfig& config);
  // After a kPrefill or kDecode forward: the tokens drawn for next_draws()'s rows and the hidden
  // state at the stage's last position. Then: another kDecode, or the stage's end (the next
  // stage's kPrefill, kVocode or the next sentence). voxd::Error when a row drew nothing (−1:
  // the logits were NaN), leaving the stream as it was.
  void advance(std::span<const int64_t> tokens, std::span<const float> hidden);

  // kVocode: the code stage's hidden states [frames, hidden] of the sentence (those not taken).
  const std::vector<float>& hidden_states() const { return hidden_; }
  // The code stage's hidden states made since the last take, moved out: a caller that streams
  // the sentence's audio takes them after each advance().
  std::vector<float> take_hidden_states() { return std::exchange(hidden_, {}); }
  int64_t frames() const { return frames_; }
  // After kVocode: the sentence's audio is made; moves to the next sentence or kDone.
  void vocoded();
  // kDecode: the stage's cache is gone (its pages taken back for other streams): back to
  // kPrefill over every position so far, after which the stage goes on with the tokens it would
  // have drawn (the draws depend on the seed and the step alone).
  void preempt();
  // Whether the next kPrefill recomputes a preempted stage.
  bool recomputing() const { return recomputing_; }
  // The silence after the sentence just vocoded (or skipped for want of frames), in samples; the
  // caller plays it before the next sentence's audio.
  int64_t pause_samples() const { return pause_samples_; }

  // Totals so far: sentences finished, code frames, sentences whose code stage reached
  // max_new_token without its end token (cut there), and whether the speaker was drawn for want
  // of one.
  int64_t sentences_done() const { return sentences_done_; }
  int64_t code_frames() const { return code_frames_total_; }
  int64_t truncated() const { return truncated_; }
  bool drew_speaker() const { return drew_speaker_; }

 private:
  const std::vector<float>* speaker_ptr() const { return speaker_ ? &*speaker_ : nullptr; }
  // Starts sentence `sentence_`'s first stage, or kDone past the last.
  void start_sentence();
  // A stage's prompt template as token ids: those before {text} and those after it.
  struct PromptTemplate {
    std::vector<int64_t> before;
    std::vector<int64_t> after;
  };
  // The code (or refine) stage's template, {prompt} filled with the stage's prompt; tokenized
  // once, in the constructor, once the speaker is known.
  PromptTemplate template_of(bool code) const;
  // InputTooLongError when sentence `sentence`'s code (or refine) prompt, its template around
  // `text_tokens` tokens, does not fit the GPT's positions.
  void check_prompt(bool code, size_t text_tokens, size_t sentence) const;
  // The tokens a sentence's code stage can be prompted with: its own, or as many as refining
  // can give back.
  int64_t longest_code_text(int64_t text_tokens) const;
  // Starts a stage on its template around `text_ids` (after check_prompt).
  void start_stage(bool code, const std::vector<int64_t>& text_ids);
  // The stage drew its end token (`ended`) or ran out of tokens or positions.
  void end_stage(bool ended);
  uint64_t seed_of_stage() const;

  const VoiceConfig& config_;
  const TextFrontEnd& front_end_;
  GenerationOptions options_;
  StageConfig refine_;
  StageConfig code_;
  std::vector<text::Sentence> sentences_;
  std::optional<std::vector<float>> speaker_;  // normalised
  bool drew_speaker_ = false;
  PromptTemplate code_template_;
  PromptTemplate refine_template_;
  std::vector<Widest> widest_from_;  // widest_sentence() at each sentence, made once

  Next next_ = Next::kDone;
  size_t sentence_ = 0;
  bool code_stage_ = false;
  std::vector<int64_t> prompt_;
  int64_t positions_ = 0;
  int64_t prefilled_ = 0;
  int64_t capacity_ = 0;
  bool recomputing_ = false;
  int64_t step_ = 0;  // tokens drawn in this stage
  std::vector<std::vector<int64_t>> history_;
  std::vector<int64_t> next_ids_;
  std::vector<int64_t> refined_;  // the refine stage's tokens
  std::vector<float> hidden_;     // the code stage's hidden states
  int64_t frames_ = 0;
  int64_t pause_samples_ = 0;

  int64_t sentences_done_ = 0;
  int64_t code_frames_total_ = 0;
  int64_t truncated_ = 0;
};

}  // namespace voxd::chattts
