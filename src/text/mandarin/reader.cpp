#include "text/mandarin/reader.h"

#include <opencc/opencc.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "core/error.h"
#include "text/mandarin/characters.h"
#include "text/mandarin/numbers.h"
#include "text/mandarin/sandhi.h"
#include "text/mandarin/segmenter.h"
#include "text/markup.h"
#include "text/normalize.h"

namespace voxd::text::mandarin {
namespace {

// A stretch of the input and the pinyin the user gave for its last characters.
struct Piece {
  std::string text;
  std::vector<Syllable> given;
  std::string written;  // the override as written, for messages
};

// Whether `inside` is written as pinyin: syllables parse_syllable reads, in lower case,
// separated by spaces ("hang2", "yin2 hang2", "lü4"). [MP3], [A1] and [Python 3] are not: they
// stay text.
bool pinyin_like(std::string_view inside) {
  bool any = false;
  while (!inside.empty()) {
    const size_t space = inside.find(' ');
    const std::string_view token = inside.substr(0, space);
    inside.remove_prefix(space == std::string_view::npos ? inside.size() : space + 1);
    if (token.empty()) continue;
    const bool lower =
        std::none_of(token.begin(), token.end(), [](char c) { return c >= 'A' && c <= 'Z'; });
    if (!lower || !parse_syllable(token)) return false;
    any = true;
  }
  return any;
}

// The text cut after each "[pinyin]" that follows characters ("银行[yin2 hang2]").
std::vector<Piece> split_overrides(std::string_view text, const MandarinLexicon& lexicon) {
  std::vector<Piece> pieces;
  size_t from = 0;
  size_t search = 0;
  while (true) {
    const size_t open = text.find('[', search);
    if (open == std::string_view::npos) break;
    // The next bracket of either kind: a '[' before any ']' starts the search over from it, so
    // that each byte is looked at a bounded number of times ("[[[[...]").
    const size_t close = text.find_first_of("[]", open + 1);
    if (close == std::string_view::npos) break;
    search = close;
    if (text[close] == '[') continue;
    const std::string_view inside = text.substr(open + 1, close - open - 1);
    if (!pinyin_like(inside)) continue;
    const std::string written(text.substr(open, close - open + 1));
    pieces.push_back({.text = std::string(text.substr(from, open - from)),
                      .given = parse_syllables(inside, lexicon, "the pinyin " + written),
                      .written = written});
    from = close + 1;
    search = from;
  }
  pieces.push_back({.text = std::string(text.substr(from)), .given = {}, .written = {}});
  return pieces;
}

std::string code_point(char32_t code) {
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "U+%04X", static_cast<unsigned>(code));
  return buffer;
}

// "'<character>' (U+XXXX) <what>", the warning about a character that is left out.
std::string left_out(std::string_view bytes, char32_t code, std::string_view what) {
  std::string message = "'";
  message.append(bytes).append("' (").append(code_point(code)).append(") ").append(what);
  return message;
}

constexpr std::string_view kNotRead =
    "is not read: voxd reads Chinese characters, Latin letters and numbers";

// ReadSentence::ending for a sentence ended by `code`.
char sentence_ending(char32_t code) {
  if (code == U'？' || code == U'?') return '?';
  if (code == U'！' || code == U'!') return '!';
  return '.';
}

Break break_of(char32_t code) {
  switch (code) {
    case U'。':
    case U'！':
    case U'？':
    case U'!':
    case U'?':
    case U'.':
    case U'…':
    case U'\n':
      return Break::kSentence;
    case U'，':
    case U',':
    case U'；':
    case U';':
    case U'：':
    case U':':
      return Break::kClause;
    case U'、':
      return Break::kShort;
    default:
      return Break::kNone;
  }
}

// Characters that separate words without a pause of their own: spaces, quotes, brackets, dashes.
bool is_separator(char32_t code) {
  const int8_t type = u_charType(static_cast<UChar32>(code));
  return u_isUWhiteSpace(static_cast<UChar32>(code)) || type == U_START_PUNCTUATION ||
         type == U_END_PUNCTUATION || type == U_INITIAL_PUNCTUATION ||
         type == U_FINAL_PUNCTUATION || type == U_DASH_PUNCTUATION || type == U_OTHER_PUNCTUATION ||
         type == U_CONNECTOR_PUNCTUATION || type == U_MATH_SYMBOL || type == U_CURRENCY_SYMBOL ||
         type == U_MODIFIER_SYMBOL;
}

bool latin_inside(char32_t code) {
  return is_latin_letter(code) || (code >= '0' && code <= '9') || code == '\'' || code == '-';
}

// Builds the sentences of the normalised text, character by character.
class SentenceBuilder {
 public:
  SentenceBuilder(const MandarinLexicon& lexicon, MandarinReading& out)
      : lexicon_(lexicon), out_(out) {}

  void read(const std::string& text, const std::vector<std::optional<Syllable>>& given) {
    chars_ = characters(text);
    given_ = &given;
    size_t i = 0;
    while (i < chars_.size()) {
      const char32_t code = chars_[i].code;
      if (readable_hanzi(i)) {
        size_t end = i;
        while (end < chars_.size() && readable_hanzi(end)) {
          ++end;
        }
        read_hanzi(i, end);
        i = end;
        continue;
      }
      if (is_latin_letter(code)) {
        size_t end = i;
        while (end < chars_.size() && latin_inside(chars_[end].code)) ++end;
        while (end > i + 1 && !is_latin_letter(chars_[end - 1].code)) --end;
        add_latin(i, end);
        i = end;
        continue;
      }
      if (const Break mark = break_of(code); mark != Break::kNone) {
        if (mark == Break::kSentence) ending_ = sentence_ending(code);
        mark_break(mark);
      } else if (is_hanzi(code)) {
        warn(left_out(chars_[i].bytes, code, "has no reading in the Mandarin lexicon: left out"));
      } else if (!is_separator(code) && !(code >= '0' && code <= '9')) {
        warn(left_out(chars_[i].bytes, code, kNotRead));
      }
      ++i;
    }
    mark_break(Break::kSentence);
  }

 private:
  // A hanzi with a reading: the lexicon's, or one the user gave.
  bool readable_hanzi(size_t at) const {
    return is_hanzi(chars_[at].code) &&
           ((*given_)[at].has_value() || lexicon_.char_readings(chars_[at].bytes));
  }

  void read_hanzi(size_t first, size_t end) {
    const std::string_view run(
        chars_[first].bytes.data(),
        static_cast<size_t>(chars_[end - 1].bytes.data() + chars_[end - 1].bytes.size() -
                            chars_[first].bytes.data()));
    size_t at = first;
    for (const std::string_view word : segment(run, lexicon_)) {
      const size_t count = characters(word).size();
      words_.push_back(read_word(word, at, count));
      at += count;
    }
  }

  ReadWord read_word(std::string_view text, size_t first, size_t count) {
    ReadWord word;
    word.text = std::string(text);
    const MandarinLexicon::Word* known = lexicon_.word(text);
    word.tag = known ? known->tag : std::string();
    std::vector<std::optional<Syllable>> readings(count);
    if (const std::vector<Syllable>* phrase = count > 1 ? lexicon_.reading(text) : nullptr) {
      std::copy(phrase->begin(), phrase->end(), readings.begin());
      word.from_phrase = true;
    } else if (count > 1) {
      read_over_phrases(first, count, readings);
    }
    // A deployment's lexicon entry is read as written, like an inline override.
    const bool user_word = lexicon_.user_word(text);
    for (size_t i = 0; i < count; ++i) {
      const Character& c = chars_[first + i];
      const std::optional<Syllable>& inline_given = (*given_)[first + i];
      const std::optional<Syllable> given =
          inline_given ? inline_given
                       : (user_word ? std::optional<Syllable>(readings[i].value_or(
                                          lexicon_.char_readings(c.bytes)->front()))
                                    : std::nullopt);
      const Syllable syllable =
          given ? *given : readings[i].value_or(lexicon_.char_readings(c.bytes)->front());
      if (syllable.letters == "r" && !word.syllables.empty() && !given) {
        word.syllables.back().letters += 'r';  // erhua: 花儿 hua1 r5 -> huar1
        word.hanzi.back() += c.bytes;
        continue;
      }
      word.syllables.push_back(syllable);
      word.hanzi.emplace_back(c.bytes);
      word.given.push_back(given.has_value());
    }
    return word;
  }

  // A word the lexicon has no reading for, read over its shorter phrases: the split covering
  // the most characters with phrases, the fewest pieces on a tie (银行行长 = 银行 + 行长).
  void read_over_phrases(size_t first, size_t count,
                         std::vector<std::optional<Syllable>>& readings) {
    auto bytes_of = [&](size_t from, size_t length) {
      const Character& last = chars_[first + from + length - 1];
      const char* begin = chars_[first + from].bytes.data();
      return std::string_view(begin,
                              static_cast<size_t>(last.bytes.data() + last.bytes.size() - begin));
    };
    struct Route {
      size_t covered = 0;
      size_t pieces = 0;
      size_t length = 1;  // of the first piece
    };
    std::vector<Route> best(count + 1);
    for (size_t i = count; i-- > 0;) {
      best[i] = {.covered = best[i + 1].covered, .pieces = best[i + 1].pieces + 1, .length = 1};
      for (size_t length = 2; i + length <= count && length < count; ++length) {
        if (!lexicon_.reading(bytes_of(i, length))) continue;
        const Route& rest = best[i + length];
        const Route route{
            .covered = rest.covered + length, .pieces = rest.pieces + 1, .length = length};
        if (route.covered > best[i].covered ||
            (route.covered == best[i].covered && route.pieces < best[i].pieces)) {
          best[i] = route;
        }
      }
    }
    for (size_t i = 0; i < count; i += best[i].length) {
      if (best[i].length < 2) continue;
      const std::vector<Syllable>& phrase = *lexicon_.reading(bytes_of(i, best[i].length));
      std::copy(phrase.begin(), phrase.end(), readings.begin() + static_cast<ptrdiff_t>(i));
    }
  }

  void add_latin(size_t first, size_t end) {
    ReadWord word;
    for (size_t i = first; i < end; ++i) word.text += chars_[i].bytes;
    word.tag = "eng";
    words_.push_back(std::move(word));
  }

  void mark_break(Break mark) {
    if (words_.empty()) {
      ending_ = '.';
      return;
    }
    words_.back().after = std::max(words_.back().after, mark);
    if (mark == Break::kSentence) finish_sentence();
  }

  void finish_sentence() {
    while (!words_.empty()) {
      const size_t cut = sentence_cut();
      std::vector<ReadWord> sentence_words(words_.begin(),
                                           words_.begin() + static_cast<ptrdiff_t>(cut));
      words_.erase(words_.begin(), words_.begin() + static_cast<ptrdiff_t>(cut));
      sentence_words.back().after = Break::kSentence;
      group_prosodic_words(sentence_words);
      apply_tone_sandhi(sentence_words, lexicon_);
      ReadSentence sentence;
      for (const ReadWord& word : sentence_words) {
        if (word.latin() && !sentence.text.empty()) sentence.text += ' ';
        sentence.text += word.text;
        if (word.latin()) sentence.text += ' ';
      }
      while (!sentence.text.empty() && sentence.text.back() == ' ') sentence.text.pop_back();
      sentence.words = std::move(sentence_words);
      if (words_.empty()) sentence.ending = ending_;  // a longer sentence's pieces end with '.'
      if (!out_.normalized.empty()) out_.normalized += '\n';
      out_.normalized += sentence.text;
      out_.sentences.push_back(std::move(sentence));
    }
  }

  // How many of the pending words make the next sentence: all of them, or, when they have more
  // than kMaxSentenceSyllables, the most that fit ending at the largest break.
  size_t sentence_cut() const {
    size_t syllables = 0;
    size_t cut = 0;
    Break largest = Break::kNone;
    for (size_t w = 0; w < words_.size(); ++w) {
      syllables += std::max<size_t>(words_[w].syllables.size(), 1);
      if (syllables > MandarinReader::kMaxSentenceSyllables) return std::max<size_t>(cut, 1);
      if (words_[w].after >= largest) {
        largest = words_[w].after;
        cut = w + 1;
      }
    }
    return words_.size();
  }

  void warn(std::string message) {
    if (warned_.insert(message).second) out_.warnings.push_back(std::move(message));
  }

  const MandarinLexicon& lexicon_;
  MandarinReading& out_;
  std::vector<Character> chars_;
  const std::vector<std::optional<Syllable>>* given_ = nullptr;
  std::vector<ReadWord> words_;
  char ending_ = '.';  // the ending of the sentence being read (ReadSentence::ending)
  std::set<std::string> warned_;
};

// Warnings for the symbols (emoji, dingbats) that clean_unicode drops unseen.
void warn_dropped_symbols(std::string_view text, std::vector<std::string>& warnings) {
  std::set<char32_t> seen;
  for (const Character& c : characters(text)) {
    const auto code = static_cast<UChar32>(c.code);
    if (u_charType(code) != U_OTHER_SYMBOL ||
        u_getIntPropertyValue(code, UCHAR_DECOMPOSITION_TYPE) != U_DT_NONE ||
        !seen.insert(c.code).second) {
      continue;
    }
    warnings.push_back(left_out(c.bytes, c.code, kNotRead));
  }
}

}  // namespace

MandarinReader::MandarinReader(std::shared_ptr<const MandarinLexicon> lexicon)
    : lexicon_(std::move(lexicon)) {
  // OpenCC finds "t2s.json" in its own data folder; VOXD_OPENCC_DIR names another (a packed copy).
  const char* folder = std::getenv("VOXD_OPENCC_DIR");
  const std::string config =
      folder && *folder ? (std::filesystem::path(folder) / "t2s.json").string() : "t2s.json";
  try {
    to_simplified_ = std::make_unique<opencc::SimpleConverter>(config);
  } catch (const std::exception& e) {
    throw Error(
        "OpenCC's " + config +
        " (Debian package libopencc-data, or $VOXD_OPENCC_DIR) cannot be loaded: " + e.what());
  }
}

MandarinReader::~MandarinReader() = default;

MandarinReading MandarinReader::read(std::string_view text) const {
  check_utf8(text);
  MandarinReading reading;
  warn_dropped_symbols(text, reading.warnings);
  std::string normalized;
  std::vector<std::optional<Syllable>> given;
  // Markdown, HTML and SSML are not read: their text is, a <break> ending a sentence.
  std::string plain;
  for (const Span& span : parse_markup(text, "zh")) {
    if (!plain.empty()) plain.push_back('\n');
    plain.append(span.text);
  }
  for (const Piece& piece : split_overrides(plain, *lexicon_)) {
    const std::string part = read_numbers(to_simplified_->Convert(clean_unicode(piece.text)));
    const std::vector<Character> chars = characters(part);
    normalized += part;
    const size_t base = given.size();
    given.resize(base + chars.size());
    const size_t count = piece.given.size();
    if (count == 0) continue;
    size_t hanzi_at_end = 0;
    while (hanzi_at_end < chars.size() && is_hanzi(chars[chars.size() - 1 - hanzi_at_end].code)) {
      ++hanzi_at_end;
    }
    if (hanzi_at_end < count) {
      throw InputError("the pinyin " + piece.written + " gives " + std::to_string(count) +
                       " syllable(s) but follows " + std::to_string(hanzi_at_end) +
                       " Chinese character(s): write it right after the characters it reads, "
                       "one syllable each (行[hang2], 银行[yin2 hang2])");
    }
    for (size_t i = 0; i < count; ++i) given[base + chars.size() - count + i] = piece.given[i];
  }
  SentenceBuilder(*lexicon_, reading).read(normalized, given);
  return reading;
}

}  // namespace voxd::text::mandarin
