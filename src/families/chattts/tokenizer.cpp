#include "families/chattts/tokenizer.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "families/chattts/utf8.h"

namespace voxd::chattts {
namespace {

using nlohmann::json;

// ---- Character classes, as Hugging Face tokenizers sees them ----

// Whether `c` was assigned by Unicode `major`.`minor`.
bool assigned_by(char32_t c, uint8_t major, uint8_t minor) {
  UVersionInfo age;
  u_charAge(static_cast<UChar32>(c), age);
  if (age[0] == 0 && age[1] == 0) return false;
  return age[0] < major || (age[0] == major && age[1] <= minor);
}

int8_t category(char32_t c) {
  return u_charType(static_cast<UChar32>(c));
}

// Rust's char::is_whitespace: the White_Space property.
bool is_whitespace(char32_t c) {
  return u_isUWhiteSpace(static_cast<UChar32>(c));
}

// unicode_categories 0.1.1's is_other(): Cc, Cf or Co (not Cn), in its Unicode 8.0 tables.
bool is_other(char32_t c) {
  const int8_t gc = category(c);
  return (gc == U_CONTROL_CHAR || gc == U_FORMAT_CHAR || gc == U_PRIVATE_USE_CHAR) &&
         assigned_by(c, 8, 0);
}

// unicode_categories' is_mark_nonspacing() (Mn in Unicode 8.0). Four characters became Mn later
// (U+1885, U+1886 in 9.0, U+111C9 in 11.0, U+A9BD in 12.0) and U+1734 stopped being Mn in 14.0.
bool is_nonspacing_mark(char32_t c) {
  if (c == 0x1734) return true;
  if (c == 0x1885 || c == 0x1886 || c == 0x111C9 || c == 0xA9BD) return false;
  return category(c) == U_NON_SPACING_MARK && assigned_by(c, 8, 0);
}

// unicode_categories' is_punctuation() (P* in Unicode 8.0; U+111C9 and U+166D were Po then).
bool is_unicode_punctuation(char32_t c) {
  if (c == 0x111C9 || c == 0x166D) return true;
  switch (category(c)) {
    case U_DASH_PUNCTUATION:
    case U_START_PUNCTUATION:
    case U_END_PUNCTUATION:
    case U_CONNECTOR_PUNCTUATION:
    case U_OTHER_PUNCTUATION:
    case U_INITIAL_PUNCTUATION:
    case U_FINAL_PUNCTUATION:
      return assigned_by(c, 8, 0);
    default:
      return false;
  }
}

// The BertPreTokenizer's punctuation: ASCII punctuation (33-47, 58-64, 91-96, 123-126) or P*.
bool is_bert_punctuation(char32_t c) {
  if (c < 0x80)
    return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
           (c >= 123 && c <= 126);
  return is_unicode_punctuation(c);
}

// The BertNormalizer's "chinese character": the CJK ideograph blocks it lists (it leaves out
// U+2B820..U+2B91F and the extensions after F).
bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// Rust regex's \w, which single_word tests: Alphabetic, marks, Nd, Pc and Join_Control.
bool is_word_char(char32_t c) {
  const auto u = static_cast<UChar32>(c);
  if (u_hasBinaryProperty(u, UCHAR_ALPHABETIC) || u_hasBinaryProperty(u, UCHAR_JOIN_CONTROL)) {
    return true;
  }
  switch (category(c)) {
    case U_NON_SPACING_MARK:
    case U_ENCLOSING_MARK:
    case U_COMBINING_SPACING_MARK:
    case U_DECIMAL_DIGIT_NUMBER:
    case U_CONNECTOR_PUNCTUATION:
      return true;
    default:
      return false;
  }
}

// Canonical decomposition (NFD) with Unicode 9.0's data, as unicode-normalization-alignments
// 0.1.12 does it: characters assigned later neither decompose nor reorder (combining class 0).
std::u32string nfd_unicode9(std::u32string_view text) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfd = icu::Normalizer2::getNFDInstance(status);
  if (U_FAILURE(status)) throw Error(std::string("ICU NFD normaliser: ") + u_errorName(status));
  std::u32string out;
  out.reserve(text.size());
  icu::UnicodeString decomposition;
  for (const char32_t c : text) {
    if (c >= 0xC0 && assigned_by(c, 9, 0) &&
        nfd->getDecomposition(static_cast<UChar32>(c), decomposition)) {
      for (int32_t i = 0; i < decomposition.length();) {
        const UChar32 d = decomposition.char32At(i);
        out.push_back(static_cast<char32_t>(d));
        i = decomposition.moveIndex32(i, 1);
      }
    } else {
      out.push_back(c);
    }
  }
  auto combining_class = [](char32_t c) -> uint8_t {
    return c < 0x300 || !assigned_by(c, 9, 0) ? 0 : u_getCombiningClass(static_cast<UChar32>(c));
  };
  for (size_t i = 0; i < out.size();) {
    if (combining_class(out[i]) == 0) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < out.size() && combining_class(out[end]) != 0) ++end;
    std::stable_sort(
        out.begin() + static_cast<ptrdiff_t>(i), out.begin() + static_cast<ptrdiff_t>(end),
        [&](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = end;
  }
  return out;
}

// Rust's char::to_lowercase: the full lowercase mapping, which differs from the simple one only
// for U+0130 (İ → i + U+0307) outside the context-dependent rules Rust does not apply per char.
void append_lowercase(std::u32string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(c >= 'A' && c <= 'Z' ? c + 32 : c);
  } else if (c == 0x130) {
    out.push_back(U'i');
    out.push_back(0x307);
  } else {
    out.push_back(static_cast<char32_t>(u_tolower(static_cast<UChar32>(c))));
  }
}

// ---- tokenizer.json fields ----

[[noreturn]] void bad_field(const std::string& source, const std::string& field,
                            const std::string& what) {
  throw InputError(source + ": field '" + field + "' " + what);
}

const json& member(const json& object, const char* key, const std::string& source,
                   const std::string& field) {
  const auto it = object.find(key);
  if (it == object.end()) bad_field(source, field, "is missing");
  return *it;
}

bool read_bool(const json& object, const char* key, const std::string& source,
               const std::string& prefix) {
  const json& value = member(object, key, source, prefix + key);
  if (!value.is_boolean()) bad_field(source, prefix + key, "must be true or false");
  return value.get<bool>();
}

std::string read_string(const json& object, const char* key, const std::string& source,
                        const std::string& prefix) {
  const json& value = member(object, key, source, prefix + key);
  if (!value.is_string()) bad_field(source, prefix + key, "must be a string");
  return value.get<std::string>();
}

const json& read_object(const json& object, const char* key, const std::string& source) {
  const json& value = member(object, key, source, key);
  if (!value.is_object()) bad_field(source, key, "must be an object");
  return value;
}

void expect_type(const json& object, const std::string& field, const char* type,
                 const std::string& source) {
  const std::string got = read_string(object, "type", source, field + ".");
  if (got != type) {
    bad_field(source, field + ".type",
              "is '" + got + "'; voxd reads only " + type + " in a ChatTTS tokenizer.json");
  }
}

}  // namespace

Tokenizer Tokenizer::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open the tokenizer file");
  std::ostringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof()) throw InputError(path + ": cannot read the tokenizer file");
  return from_json(text.str(), path);
}

Tokenizer Tokenizer::from_json(std::string_view json_text, const std::string& source) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::parse_error& e) {
    throw InputError(source + ": not a tokenizer.json (" + e.what() + ")");
  }
  if (!root.is_object()) throw InputError(source + ": not a tokenizer.json (not a JSON object)");
  if (const auto version = root.find("version");
      version != root.end() && (!version->is_string() || *version != "1.0")) {
    bad_field(source, "version", "must be \"1.0\", the only tokenizers format voxd reads");
  }

  Tokenizer t;
  t.source_ = source;

  const json& model = read_object(root, "model", source);
  expect_type(model, "model", "WordPiece", source);
  t.prefix_ = read_string(model, "continuing_subword_prefix", source, "model.");
  const json& max_chars =
      member(model, "max_input_chars_per_word", source, "model.max_input_chars_per_word");
  if (!max_chars.is_number_unsigned()) {
    bad_field(source, "model.max_input_chars_per_word", "must be a non-negative integer");
  }
  t.max_input_chars_per_word_ = max_chars.get<uint64_t>();
  const json& vocab = member(model, "vocab", source, "model.vocab");
  if (!vocab.is_object() || vocab.empty()) {
    bad_field(source, "model.vocab", "must be a non-empty object of token: id");
  }
  t.tokens_.assign(vocab.size(), std::string());
  std::vector<bool> seen(vocab.size(), false);
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_unsigned() || id.get<uint64_t>() >= vocab.size()) {
      bad_field(source, "model.vocab",
                "gives '" + token + "' the id " + id.dump() + "; ids must be 0.." +
                    std::to_string(vocab.size() - 1));
    }
    const auto index = id.get<size_t>();
    if (seen[index]) {
      bad_field(source, "model.vocab", "gives the id " + std::to_string(index) + " twice");
    }
    seen[index] = true;
    t.tokens_[index] = token;
    t.vocab_.emplace(token, static_cast<int32_t>(index));
  }
  const std::string unk = read_string(model, "unk_token", source, "model.");
  const auto unk_it = t.vocab_.find(unk);
  if (unk_it == t.vocab_.end()) {
    bad_field(source, "model.unk_token", "names '" + unk + "', which is not in model.vocab");
  }
  t.unk_id_ = unk_it->second;

  const json& normalizer = read_object(root, "normalizer", source);
  expect_type(normalizer, "normalizer", "BertNormalizer", source);
  t.normalizer_.clean_text = read_bool(normalizer, "clean_text", source, "normalizer.");
  t.normalizer_.handle_chinese_chars =
      read_bool(normalizer, "handle_chinese_chars", source, "normalizer.");
  t.normalizer_.lowercase = read_bool(normalizer, "lowercase", source, "normalizer.");
  const auto strip = normalizer.find("strip_accents");
  if (strip == normalizer.end() || strip->is_null()) {
    t.normalizer_.strip_accents = t.normalizer_.lowercase;
  } else if (strip->is_boolean()) {
    t.normalizer_.strip_accents = strip->get<bool>();
  } else {
    bad_field(source, "normalizer.strip_accents", "must be true, false or null");
  }

  const json& pre_tokenizer = read_object(root, "pre_tokenizer", source);
  expect_type(pre_tokenizer, "pre_tokenizer", "BertPreTokenizer", source);

  if (const auto added = root.find("added_tokens"); added != root.end() && !added->is_null()) {
    if (!added->is_array()) bad_field(source, "added_tokens", "must be a list");
    for (size_t i = 0; i < added->size(); ++i) t.add_token((*added)[i], i);
  }
  for (AddedTokenSet* set : {&t.raw_added_, &t.normalized_added_}) {
    for (size_t i = 0; i < set->tokens.size(); ++i) {
      set->by_first_char[set->tokens[i].pattern.front()].push_back(i);
    }
    for (auto& [first, indices] : set->by_first_char) {
      std::stable_sort(indices.begin(), indices.end(), [&](size_t a, size_t b) {
        return set->tokens[a].pattern.size() > set->tokens[b].pattern.size();
      });
    }
  }
  return t;
}

// Added tokens take their ids as tokenizers gives them: a vocab entry's id, else the next id
// after the vocab, in the file's order (the file's "id" fields say the same for a file
// tokenizers wrote).
void Tokenizer::add_token(const json& entry, size_t index) {
  const std::string where = "added_tokens[" + std::to_string(index) + "].";
  if (!entry.is_object()) {
    bad_field(source_, where.substr(0, where.size() - 1), "must be an object");
  }
  const std::string content = read_string(entry, "content", source_, where);
  AddedToken token;
  token.single_word = read_bool(entry, "single_word", source_, where);
  token.lstrip = read_bool(entry, "lstrip", source_, where);
  token.rstrip = read_bool(entry, "rstrip", source_, where);
  const bool normalized = read_bool(entry, "normalized", source_, where);
  // "special" matters only to decoding that skips specials, and to encode_special_tokens,
  // which ChatTTS leaves off: checked like the other fields, then unused.
  read_bool(entry, "special", source_, where);
  if (content.empty()) return;  // tokenizers ignores empty tokens
  if (const auto known = added_ids_.find(content); known != added_ids_.end()) {
    token.id = known->second;
  } else if (const auto in_vocab = vocab_.find(content); in_vocab != vocab_.end()) {
    token.id = in_vocab->second;
  } else {
    token.id = static_cast<int32_t>(tokens_.size());
    tokens_.push_back(content);
  }
  added_ids_[content] = token.id;
  const std::u32string text = decode_utf8(content, source_ + ": " + where + "content");
  token.pattern = normalized ? normalize(text) : text;
  // A token listed again replaces its earlier entry (tokenizers keeps one per id).
  for (AddedTokenSet* set : {&raw_added_, &normalized_added_}) {
    std::erase_if(set->tokens, [&](const AddedToken& a) { return a.id == token.id; });
  }
  if (token.pattern.empty()) return;
  AddedTokenSet& set = normalized ? normalized_added_ : raw_added_;
  for (const AddedToken& a : set.tokens) {
    if (a.pattern == token.pattern) {
      bad_field(source_, where + "content",
                "matches the same text as the added token '" + tokens_[a.id] + "'");
    }
  }
  set.tokens.push_back(std::move(token));
}

std::u32string Tokenizer::normalize(std::u32string_view text) const {
  std::u32string out;
  out.reserve(text.size());
  for (char32_t c : text) {
    if (normalizer_.clean_text) {
      if (c == 0 || c == 0xFFFD) continue;
      const bool kept_control = c == '\t' || c == '\n' || c == '\r';
      if (!kept_control && is_other(c)) continue;
      if (is_whitespace(c)) c = U' ';
    }
    if (normalizer_.handle_chinese_chars && is_chinese_char(c)) {
      out.push_back(U' ');
      out.push_back(c);
      out.push_back(U' ');
    } else {
      out.push_back(c);
    }
  }
  if (normalizer_.strip_accents) {
    std::u32string decomposed = nfd_unicode9(out);
    std::erase_if(decomposed, is_nonspacing_mark);
    out = std::move(decomposed);
  }
  if (normalizer_.lowercase) {
    std::u32string lowered;
    lowered.reserve(out.size());
    for (const char32_t c : out) append_lowercase(lowered, c);
    out = std::move(lowered);
  }
  return out;
}

// The leftmost added token of `set` in `text` at or after `from`, the longest of those starting
// there; {text.size(), nullptr} when there is none.
std::pair<size_t, const Tokenizer::AddedToken*> Tokenizer::find_added(std::u32string_view text,
                                                                      const AddedTokenSet& set,
                                                                      size_t from) {
  for (size_t start = from; start < text.size(); ++start) {
    const auto bucket = set.by_first_char.find(text[start]);
    if (bucket == set.by_first_char.end()) continue;
    for (const size_t index : bucket->second) {
      const std::u32string& pattern = set.tokens[index].pattern;
      if (text.substr(start, pattern.size()) == pattern) return {start, &set.tokens[index]};
    }
  }
  return {text.size(), nullptr};
}

template <typename Piece>
void Tokenizer::split_added(std::u32string_view text, const AddedTokenSet& set,
                            std::vector<int32_t>& ids, Piece&& then) const {
  size_t piece_start = 0;  // start of the text not yet given to `then`
  size_t search = 0;       // where the next match may start (tokenizers' match iterator)
  while (true) {
    auto [start, match] = find_added(text, set, search);
    if (match == nullptr) break;
    size_t stop = start + match->pattern.size();
    search = stop;
    if (match->single_word) {
      const bool space_before = start == 0 || !is_word_char(text[start - 1]);
      const bool space_after = stop == text.size() || !is_word_char(text[stop]);
      if (!space_before || !space_after) continue;  // left in the text around it
    }
    if (match->lstrip) {
      size_t s = start;
      while (s > 0 && is_whitespace(text[s - 1])) --s;
      start = std::max(s, piece_start);
    }
    if (match->rstrip) {
      while (stop < text.size() && is_whitespace(text[stop])) ++stop;
    }
    if (piece_start < start) then(text.substr(piece_start, start - piece_start));
    ids.push_back(match->id);
    piece_start = stop;
  }
  if (piece_start < text.size()) then(text.substr(piece_start));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  const std::u32string chars = decode_utf8(text, "text");
  std::vector<int32_t> ids;
  split_added(chars, raw_added_, ids, [&](std::u32string_view piece) {
    const std::u32string normalized = normalize(piece);
    split_added(normalized, normalized_added_, ids,
                [&](std::u32string_view rest) { pre_tokenize_and_encode(rest, ids); });
  });
  return ids;
}

void Tokenizer::pre_tokenize_and_encode(std::u32string_view text, std::vector<int32_t>& ids) const {
  size_t word_start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const bool space = is_whitespace(text[i]);
    if (!space && !is_bert_punctuation(text[i])) continue;
    if (word_start < i) encode_word(text.substr(word_start, i - word_start), ids);
    if (!space) encode_word(text.substr(i, 1), ids);
    word_start = i + 1;
  }
  if (word_start < text.size()) encode_word(text.substr(word_start), ids);
}

void Tokenizer::encode_word(std::u32string_view word, std::vector<int32_t>& ids) const {
  if (word.size() > max_input_chars_per_word_) {
    ids.push_back(unk_id_);
    return;
  }
  // UTF-8 of the word, and the byte offset of each character (plus the end).
  std::string utf8;
  std::vector<size_t> offsets;
  offsets.reserve(word.size() + 1);
  for (const char32_t c : word) {
    offsets.push_back(utf8.size());
    append_utf8(utf8, c);
  }
  offsets.push_back(utf8.size());

  const size_t first_piece = ids.size();
  std::string candidate;
  for (size_t start = 0; start < word.size();) {
    size_t end = word.size();
    const int32_t* found = nullptr;
    for (; end > start; --end) {
      candidate.clear();
      if (start > 0) candidate = prefix_;
      candidate.append(utf8, offsets[start], offsets[end] - offsets[start]);
      if (const auto it = vocab_.find(candidate); it != vocab_.end()) {
        found = &it->second;
        break;
      }
    }
    if (found == nullptr) {
      ids.resize(first_piece);
      ids.push_back(unk_id_);
      return;
    }
    ids.push_back(*found);
    start = end;
  }
}

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  if (const auto it = added_ids_.find(token); it != added_ids_.end()) return it->second;
  if (const auto it = vocab_.find(token); it != vocab_.end()) return it->second;
  return std::nullopt;
}

int32_t Tokenizer::require_token_id(std::string_view token) const {
  const std::optional<int32_t> id = token_id(token);
  if (!id) throw InputError(source_ + ": has no token '" + std::string(token) + "'");
  return *id;
}

std::vector<std::string> Tokenizer::decode(std::span<const int32_t> ids) const {
  std::vector<std::string> out;
  out.reserve(ids.size());
  for (const int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) {
      throw InputError("token id " + std::to_string(id) + " is outside " + source_ +
                       "'s vocabulary (0.." + std::to_string(vocab_size() - 1) + ")");
    }
    out.push_back(tokens_[static_cast<size_t>(id)]);
  }
  return out;
}

}  // namespace voxd::chattts
