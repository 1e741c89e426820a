// ChatTTS's text tokenizer: a BERT WordPiece tokenizer read from a Hugging Face tokenizers-format
// tokenizer.json (ChatTTS's asset/tokenizer/tokenizer.json holds bert-base-chinese's 21128
// tokens and ChatTTS's 50 added ones, [Sasr] .. [speed_9], 21178 ids), encoding text to the ids
// ChatTTS feeds its GPT. ChatTTS (ChatTTS/model/tokenizer.py, Tokenizer.encode) calls
// transformers' BertTokenizerFast.encode_plus(text, add_special_tokens=False, padding=True) per
// text: no [CLS]/[SEP], no truncation and, for one text, no padding (that call overrides the
// file's post_processor, truncation and padding fields, so they are not read). Padding a batch
// (ChatTTS pads on the left) and the text mask are the caller's.
//
// encode() follows Hugging Face tokenizers for such a file, in its order:
//   1. the added tokens with normalized false are found in the raw text (leftmost first, then
//      longest), honouring single_word, lstrip and rstrip;
//   2. the text between them goes through the BertNormalizer: clean_text drops U+0000, U+FFFD
//      and control/format/private-use characters but \t \n \r, then turns whitespace into ' ';
//      handle_chinese_chars puts spaces around CJK ideographs; strip_accents (null: as lowercase)
//      decomposes (NFD) and drops non-spacing marks; lowercase lowercases each character;
//   3. the added tokens with normalized true are found in that normalized text;
//   4. the rest is split by the BertPreTokenizer at whitespace (dropped) and around each
//      punctuation character (Unicode P* and ASCII 33-47, 58-64, 91-96, 123-126);
//   5. each word becomes WordPiece ids: longest vocab entry first, later pieces with the
//      continuing_subword_prefix ("##"); a word that cannot be covered, or that is longer than
//      max_input_chars_per_word characters, becomes the one unk_token id.
// Character classes come from ICU, limited to the characters of the Unicode versions tokenizers
// was built with (its unicode_categories tables are Unicode 8.0, its NFD tables Unicode 9.0), so
// characters assigned later are treated as it treats them.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace voxd::chattts {

class Tokenizer {
 public:
  // Reads a tokenizer.json; throws voxd::InputError naming `path` and the field for a file that
  // is not JSON, not a WordPiece model with a BertNormalizer and a BertPreTokenizer, has a vocab
  // whose ids are not 0..N-1 each once, or whose unk_token is not in the vocab.
  static Tokenizer from_file(const std::string& path);
  // As from_file, for the text of a tokenizer.json; `source` names it in error messages.
  static Tokenizer from_json(std::string_view json_text, const std::string& source);

  // The ids of UTF-8 `text` (empty for text with no tokens); throws voxd::InputError naming the
  // byte offset for invalid UTF-8.
  std::vector<int32_t> encode(std::string_view text) const;

  // The number of ids: the vocab and the added tokens outside it (transformers' len(tokenizer);
  // 21178 for ChatTTS).
  int32_t vocab_size() const { return static_cast<int32_t>(tokens_.size()); }
  // The id of a token string (an added token or a vocab entry such as "##ing"), if it has one.
  std::optional<int32_t> token_id(std::string_view token) const;
  // The id of a token string; throws voxd::InputError naming the file when it has none (for the
  // control tokens a model needs: [Stts], [spk_emb], [Ptts], [break_0] ...).
  int32_t require_token_id(std::string_view token) const;
  // The token strings of `ids`, as the vocab and added tokens write them (no "##" joining);
  // throws voxd::InputError for an id outside 0..vocab_size()-1.
  std::vector<std::string> decode(std::span<const int32_t> ids) const;

 private:
  struct AddedToken {
    std::u32string pattern;  // the content, normalized when `normalized`
    int32_t id = 0;
    bool single_word = false;
    bool lstrip = false;
    bool rstrip = false;
  };
  // Added tokens of one kind (normalized or not), indexed by their first character, longest
  // first within each.
  struct AddedTokenSet {
    std::vector<AddedToken> tokens;
    std::unordered_map<char32_t, std::vector<size_t>> by_first_char;
  };
  struct Normalizer {
    bool clean_text = true;
    bool handle_chinese_chars = true;
    bool strip_accents = true;
    bool lowercase = true;
  };
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using Vocab = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

  Tokenizer() = default;
  // Reads added_tokens[index] (the normalizer must be read already, for normalized tokens).
  void add_token(const nlohmann::json& entry, size_t index);
  std::u32string normalize(std::u32string_view text) const;
  static std::pair<size_t, const AddedToken*> find_added(std::u32string_view text,
                                                         const AddedTokenSet& set, size_t from);
  // Appends the ids of `text`, splitting out the added tokens of `set`; `then` gets each piece
  // between them.
  template <typename Piece>
  void split_added(std::u32string_view text, const AddedTokenSet& set, std::vector<int32_t>& ids,
                   Piece&& then) const;
  void pre_tokenize_and_encode(std::u32string_view text, std::vector<int32_t>& ids) const;
  void encode_word(std::u32string_view word, std::vector<int32_t>& ids) const;

  std::string source_;
  Normalizer normalizer_;
  Vocab vocab_;                      // the WordPiece model's entries
  Vocab added_ids_;                  // added tokens by content
  std::vector<std::string> tokens_;  // by id
  AddedTokenSet raw_added_;          // normalized false: found in the raw text
  AddedTokenSet normalized_added_;   // normalized true: found in the normalized text
  std::string prefix_;
  uint64_t max_input_chars_per_word_ = 100;
  int32_t unk_id_ = 0;
};

}  // namespace voxd::chattts
