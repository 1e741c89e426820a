#include "families/chattts/text_front_end.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "text/markup.h"
#include "text/normalize.h"
#include "text/sentences.h"

namespace voxd::chattts {
namespace {

// Control tokens are written in brackets ("[uv_break]", "[laugh][lbreak]"), which Markdown reads
// as links: each one found in the text stands in for the markup pass and the splitting as one
// private-use character (U+E000 + its index), so neither changes or cuts it.
constexpr char32_t kFirstPlaceholder = 0xE000;
constexpr size_t kMaxPlaceholders = 6400;  // U+E000..U+F8FF
constexpr size_t kLongestToken = 32;

void append_utf8(std::string& out, char32_t c) {
  out += static_cast<char>(0xE0 | (c >> 12));
  out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
  out += static_cast<char>(0x80 | (c & 0x3F));
}

struct Protected {
  std::string text;
  std::vector<std::string> tokens;  // placeholder i stands for tokens[i]
};

Protected protect_tokens(std::string_view input, const Tokenizer& tokenizer) {
  Protected out;
  std::map<std::string, size_t, std::less<>> index;
  for (size_t i = 0; i < input.size();) {
    const size_t close = input[i] == '[' ? input.find(']', i) : std::string_view::npos;
    if (close != std::string_view::npos && close - i < kLongestToken) {
      const std::string_view token = input.substr(i, close - i + 1);
      if (tokenizer.token_id(token)) {
        auto at = index.find(token);
        if (at == index.end() && out.tokens.size() < kMaxPlaceholders) {
          at = index.emplace(std::string(token), out.tokens.size()).first;
          out.tokens.emplace_back(token);
        }
        if (at != index.end()) {
          append_utf8(out.text, kFirstPlaceholder + static_cast<char32_t>(at->second));
          i = close + 1;
          continue;
        }
      }
    }
    out.text += input[i++];
  }
  return out;
}

// Whether `piece` holds only placeholders and spaces: control tokens that belong with the
// sentence before them ("你好！[laugh][uv_break]").
bool only_tokens(std::string_view piece) {
  for (size_t i = 0; i < piece.size(); ++i) {
    const auto lead = static_cast<unsigned char>(piece[i]);
    if (lead == ' ') continue;
    if ((lead != 0xEE && lead != 0xEF) || i + 2 >= piece.size()) return false;
    i += 2;
  }
  return true;
}

std::string restore_tokens(std::string_view text, const std::vector<std::string>& tokens) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto lead = static_cast<unsigned char>(text[i]);
    if ((lead == 0xEE || lead == 0xEF) && i + 2 < text.size()) {  // U+E000..U+FFFF
      const char32_t c = ((lead & 0x0F) << 12) |
                         ((static_cast<unsigned char>(text[i + 1]) & 0x3F) << 6) |
                         (static_cast<unsigned char>(text[i + 2]) & 0x3F);
      if (c >= kFirstPlaceholder && c - kFirstPlaceholder < tokens.size()) {
        out += tokens[c - kFirstPlaceholder];
        i += 2;
        continue;
      }
    }
    out += text[i];
  }
  return out;
}

}  // namespace

TextFrontEnd::TextFrontEnd(Tokenizer tokenizer, std::string language)
    : tokenizer_(std::move(tokenizer)), language_(std::move(language)) {
  for (const char* token : {"[Stts]", "[spk_emb]", "[empty_spk]"}) {
    if (const auto id = tokenizer_.token_id(token)) prompt_only_.push_back(*id);
  }
}

bool TextFrontEnd::prompt_only(int64_t id) const {
  return std::find(prompt_only_.begin(), prompt_only_.end(), id) != prompt_only_.end();
}

text::Analysis TextFrontEnd::analyze(std::string_view input) const {
  if (input.find_first_not_of(" \t\n\r\f\v") == std::string_view::npos) {
    throw InputError("text is empty");
  }
  text::check_utf8(input);
  const Protected tokens = protect_tokens(input, tokenizer_);
  text::Analysis analysis;
  for (const text::Span& span : text::parse_markup(tokens.text, language_)) {
    if (span.rate != 1.0f) {
      throw InputError(
          "SSML <prosody rate> is not supported by ChatTTS voices; their speed is the "
          "[speed_N] token of the voice's infer_code prompt");
    }
    const std::string span_text = restore_tokens(span.text, tokens.tokens);
    if (!analysis.normalized.empty() && !span_text.empty()) analysis.normalized += '\n';
    analysis.normalized += span_text;
    for (const std::string& piece : text::split_sentences(span.text, kMaxSentenceBytes)) {
      std::vector<int32_t> ids = tokenizer_.encode(restore_tokens(piece, tokens.tokens));
      std::erase_if(ids, [&](int32_t id) { return prompt_only(id); });
      if (ids.empty()) continue;
      if (only_tokens(piece) && !analysis.sentences.empty()) {
        text::Sentence& before = analysis.sentences.back();
        before.text += restore_tokens(piece, tokens.tokens);
        before.ids.insert(before.ids.end(), ids.begin(), ids.end());
        const std::vector<std::string> units = tokenizer_.decode(ids);
        before.phonemes.insert(before.phonemes.end(), units.begin(), units.end());
        continue;
      }
      text::Sentence sentence;
      sentence.text = restore_tokens(piece, tokens.tokens);
      sentence.ids.assign(ids.begin(), ids.end());
      sentence.phonemes = tokenizer_.decode(ids);
      sentence.rate = span.rate;
      analysis.sentences.push_back(std::move(sentence));
    }
    if (!analysis.sentences.empty()) {
      int& pause = analysis.sentences.back().pause_after_ms;
      pause = text::add_pause(pause, span.pause_after_ms);
    }
  }
  if (analysis.sentences.empty()) throw InputError("text has nothing to pronounce");
  return analysis;
}

}  // namespace voxd::chattts
