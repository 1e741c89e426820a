#include "text/phonemizer.h"

#include <algorithm>
#include <array>
#include <memory>
#include <optional>
#include <utility>

#include "core/error.h"
#include "text/ascii.h"
#include "text/espeak_engine.h"
#include "text/espeak_workers.h"

namespace voxd::text {
namespace {

using ascii::is_space;

// eSpeak separates phonemes with this character (bits 8-23 of the phoneme mode); it never
// occurs in phoneme names.
constexpr char kSeparator = '\x1f';
constexpr int kModeAscii = kSeparator << 8;
constexpr int kModeIpa = 0x02 | (kSeparator << 8);

// A word as eSpeak wrote it: its phoneme names, stress marks still attached.
using Word = std::vector<std::string>;

// eSpeak's output for each of `clauses`: from the worker processes when this process uses them,
// else from the library in this process.
std::vector<std::string> espeak_raw(const std::vector<std::string>& clauses,
                                    const std::string& language, int mode) {
  if (const std::shared_ptr<EspeakWorkers> workers = espeak_workers()) {
    return workers->phonemes(clauses, language, mode);
  }
  return espeak_phonemes_in_process(clauses, language, mode);
}

// A clause's eSpeak output, word by word.
std::vector<Word> espeak_words(const std::string& raw) {
  std::vector<Word> words;
  Word word;
  std::string token;
  for (char c : raw) {
    if (c == ' ' || c == kSeparator) {
      if (!token.empty()) word.push_back(std::move(token));
      token.clear();
      if (c == ' ' && !word.empty()) words.push_back(std::move(word));
      if (c == ' ') word.clear();
    } else {
      token += c;
    }
  }
  return words;
}

// Maps a character that ends a clause to its punctuation token; nullopt for other characters.
// A hyphen is punctuation only when it stands apart from a word ("a - b", "a -- b", "a-").
std::optional<char> clause_punctuation(std::string_view text, size_t i) {
  switch (text[i]) {
    case ',':
    case '.':
    case ';':
    case ':':
    case '!':
    case '?':
    case '"':
    case '(':
    case ')':
      return text[i];
    case '[':
    case '{':
      return '(';
    case ']':
    case '}':
      return ')';
    case '-': {
      const bool word_before = i > 0 && !is_space(text[i - 1]) && text[i - 1] != '-';
      const bool word_after = i + 1 < text.size() && !is_space(text[i + 1]) && text[i + 1] != '-';
      if (word_before && word_after) return std::nullopt;
      return '-';
    }
    default:
      return std::nullopt;
  }
}

// Walks `sentence` clause by clause, reporting eSpeak's words of each clause, each punctuation
// mark, and whether the source had whitespace before the next word or mark.
template <typename OnWords, typename OnPunct>
void walk_clauses(std::string_view sentence, const std::string& language, int mode,
                  OnWords on_words, OnPunct on_punct) {
  // The sentence as clauses (trimmed, with whether whitespace stood before and after each) and
  // punctuation marks in order, then every clause through eSpeak at once.
  struct Piece {
    std::optional<char> punct;
    size_t clause = 0;  // index into clauses, when not a mark
    bool space_before = false;
    bool space_after = false;
  };
  std::vector<Piece> pieces;
  std::vector<std::string> clauses;
  bool space_only = false;  // a chunk of whitespace alone before the next piece
  std::string chunk;
  auto flush = [&] {
    const size_t first = chunk.find_first_not_of(" \t\n\r\f");
    if (first == std::string::npos) {
      space_only = space_only || !chunk.empty();
    } else {
      const size_t last = chunk.find_last_not_of(" \t\n\r\f");
      pieces.push_back(
          {std::nullopt, clauses.size(), space_only || first > 0, last + 1 < chunk.size()});
      clauses.push_back(chunk.substr(first, last - first + 1));
      space_only = false;
    }
    chunk.clear();
  };
  for (size_t i = 0; i < sentence.size(); ++i) {
    if (std::optional<char> punct = clause_punctuation(sentence, i)) {
      flush();
      pieces.push_back({punct, 0, space_only, false});
      space_only = false;
    } else {
      chunk += sentence[i];
    }
  }
  flush();
  const std::vector<std::string> raws =
      clauses.empty() ? std::vector<std::string>() : espeak_raw(clauses, language, mode);
  bool pending_space = false;
  for (const Piece& piece : pieces) {
    if (piece.punct) {
      on_punct(*piece.punct, pending_space || piece.space_before);
      pending_space = false;
      continue;
    }
    pending_space = pending_space || piece.space_before;
    std::vector<Word> words = espeak_words(raws[piece.clause]);
    if (!words.empty()) {
      on_words(std::move(words), pending_space);
      pending_space = false;
    }
    pending_space = pending_space || piece.space_after;
  }
}

bool is_stress_mark(std::string_view s, size_t i, size_t* len) {
  // "ˈ" is U+02C8 (CB 88), "ˌ" is U+02CC (CB 8C).
  if (i + 1 < s.size() && s[i] == '\xCB' && (s[i + 1] == '\x88' || s[i + 1] == '\x8C')) {
    *len = 2;
    return true;
  }
  return false;
}

// Appends one eSpeak IPA phoneme name, splitting stress marks off as tokens of their own.
void append_ipa_token(std::string_view name, std::vector<std::string>& out) {
  std::string phoneme;
  for (size_t i = 0; i < name.size();) {
    size_t len = 0;
    if (is_stress_mark(name, i, &len)) {
      if (!phoneme.empty()) out.push_back(std::move(phoneme));
      phoneme.clear();
      out.emplace_back(name.substr(i, len));
      i += len;
    } else {
      phoneme += name[i++];
    }
  }
  if (!phoneme.empty()) out.push_back(std::move(phoneme));
}

// Appends one eSpeak mnemonic: its stress mark as IPA's, a token of its own; pauses left out.
void append_mnemonic_token(std::string_view name, std::vector<std::string>& out) {
  if (!name.empty() && (name.front() == '\'' || name.front() == ',')) {
    out.emplace_back(name.front() == '\'' ? "\xCB\x88" : "\xCB\x8C");
    name.remove_prefix(1);
  }
  if (!name.empty() && name.front() != '_') out.push_back(mnemonic_phoneme(name));
}

// The tokens of `sentence` in `mode`, each eSpeak phoneme name appended by `append`, with word
// boundaries and punctuation as phonemize_ipa describes.
template <typename Append>
std::vector<std::string> phoneme_tokens(std::string_view sentence, const std::string& language,
                                        int mode, Append append) {
  std::vector<std::string> out;
  auto boundary = [&](bool space) {
    if (space && !out.empty() && out.back() != kWordBoundary) out.emplace_back(kWordBoundary);
  };
  walk_clauses(
      sentence, language, mode,
      [&](std::vector<Word> words, bool space_before) {
        boundary(space_before);
        for (size_t w = 0; w < words.size(); ++w) {
          boundary(w > 0);
          for (const std::string& name : words[w]) append(name, out);
        }
      },
      [&](char punct, bool space_before) {
        boundary(space_before);
        if (out.empty() || out.back() != std::string(1, punct)) out.emplace_back(1, punct);
      });
  while (!out.empty() && out.back() == kWordBoundary) out.pop_back();
  return out;
}

struct ArpabetEntry {
  std::string_view mnemonic;
  std::array<std::string_view, 2> phones;  // a vowel is written without its stress digit
};

// eSpeak NG's English phoneme mnemonics (phsource/ph_english, ph_english_us) → CMUdict phones.
constexpr ArpabetEntry kArpabet[] = {
    // Consonants.
    {"b", {"B"}},
    {"d", {"D"}},
    {"dZ", {"JH"}},
    {"D", {"DH"}},
    {"f", {"F"}},
    {"g", {"G"}},
    {"h", {"HH"}},
    {"j", {"Y"}},
    {"k", {"K"}},
    {"l", {"L"}},
    {"l#", {"L"}},
    {"m", {"M"}},
    {"n", {"N"}},
    {"N", {"NG"}},
    {"p", {"P"}},
    {"r", {"R"}},
    {"r-", {"R"}},
    {"s", {"S"}},
    {"S", {"SH"}},
    {"t", {"T"}},
    {"t#", {"T"}},
    {"t2", {"T"}},
    {"tS", {"CH"}},
    {"T", {"TH"}},
    {"v", {"V"}},
    {"w", {"W"}},
    {"x", {"K"}},
    {"z", {"Z"}},
    {"Z", {"ZH"}},
    {"?", {"T"}},
    {"n-", {"AH", "N"}},
    {"@L", {"AH", "L"}},
    {"m-", {"AH", "M"}},
    // Vowels.
    {"a", {"AE"}},
    {"aa", {"AE"}},
    {"a:", {"AE"}},
    {"a#", {"AH"}},
    {"a#:", {"AA"}},
    {"A:", {"AA"}},
    {"A@", {"AA", "R"}},
    {"A~", {"AA", "N"}},
    {"0", {"AA"}},
    {"O", {"AO"}},
    {"O2", {"AO"}},
    {"O:", {"AO"}},
    {"O@", {"AO", "R"}},
    {"o@", {"AO", "R"}},
    {"O~", {"AO", "N"}},
    {"OI", {"OY"}},
    {"oU", {"OW"}},
    {"aU", {"AW"}},
    {"aI", {"AY"}},
    {"aI3", {"AY", "ER"}},
    {"aI@", {"AY", "AH"}},
    {"eI", {"EY"}},
    {"e@", {"EH", "R"}},
    {"E", {"EH"}},
    {"3:", {"ER"}},
    {"3", {"ER"}},
    {"@", {"AH"}},
    {"@2", {"AH"}},
    {"@-", {"AH"}},
    {"i", {"IY"}},
    {"i:", {"IY"}},
    {"I:", {"IY"}},
    {"i@", {"IY", "AH"}},
    {"i@3", {"IH", "R"}},
    {"I", {"IH"}},
    {"I2", {"IH"}},
    {"I#", {"IH"}},
    {"u", {"UW"}},
    {"u:", {"UW"}},
    {"U", {"UH"}},
    {"U@", {"UH", "R"}},
    {"V", {"AH"}},
};

// Reduced vowels: never given the stress of an unstressed word.
bool is_reduced(std::string_view mnemonic) {
  static constexpr std::array<std::string_view, 10> kReduced{"@",  "@2", "@-", "3",  "I2",
                                                             "I#", "a#", "@L", "n-", "i"};
  return std::find(kReduced.begin(), kReduced.end(), mnemonic) != kReduced.end();
}

bool is_arpabet_vowel(std::string_view phone) {
  static constexpr std::array<std::string_view, 15> kVowels{
      "AA", "AE", "AH", "AO", "AW", "AY", "EH", "ER", "EY", "IH", "IY", "OW", "OY", "UH", "UW"};
  return std::find(kVowels.begin(), kVowels.end(), phone) != kVowels.end();
}

const ArpabetEntry* find_arpabet(std::string_view mnemonic) {
  for (const ArpabetEntry& e : kArpabet) {
    if (e.mnemonic == mnemonic) return &e;
  }
  return nullptr;
}

bool is_arpabet_punctuation(char c) {
  return c == ',' || c == ';' || c == ':' || c == '.' || c == '-' || c == '?' || c == '!';
}

}  // namespace

Phonemizer::Phonemizer() {
  if (!espeak_workers()) initialize_espeak();
}

std::vector<std::string> Phonemizer::phonemize_ipa(std::string_view sentence,
                                                   const std::string& language) const {
  return phoneme_tokens(sentence, language, kModeIpa, append_ipa_token);
}

std::vector<std::string> Phonemizer::phonemize_mnemonic(std::string_view sentence,
                                                        const std::string& language) const {
  return phoneme_tokens(sentence, language, kModeAscii, append_mnemonic_token);
}

std::vector<std::string> Phonemizer::phonemize_arpabet(std::string_view sentence,
                                                       const std::string& language) const {
  std::vector<std::string> out;
  walk_clauses(
      sentence, language, kModeAscii,
      [&](std::vector<Word> words, bool) {
        for (const Word& word : words) {
          for (std::string& phone : espeak_word_to_arpabet(word)) out.push_back(std::move(phone));
        }
      },
      [&](char punct, bool) {
        if (is_arpabet_punctuation(punct) && !out.empty() && out.back() != kArpabetPause) {
          out.emplace_back(kArpabetPause);
        }
      });
  return out;
}

std::string mnemonic_phoneme(std::string_view name) {
  std::string token;
  if (name.size() == 1 && clause_punctuation(name, 0)) token.push_back('#');
  token.append(name);
  return token;
}

std::string_view without_tone(std::string_view token) {
  size_t end = token.size();
  while (end > 0 && token[end - 1] >= '0' && token[end - 1] <= '9') --end;
  return token.size() - end >= 2 && end > 0 ? token.substr(0, end) : token;
}

bool is_phoneme(std::string_view token) {
  if (token.empty() || token == kWordBoundary || token == kArpabetPause) return false;
  return token.size() != 1 || !clause_punctuation(token, 0);
}

std::vector<std::string> espeak_word_to_arpabet(const std::vector<std::string>& mnemonics) {
  struct Phone {
    const ArpabetEntry* entry;
    char stress;
    bool reduced;
  };
  std::vector<Phone> phones;
  bool primary = false;
  for (std::string_view m : mnemonics) {
    char stress = '0';
    if (!m.empty() && (m.front() == '\'' || m.front() == ',')) {
      stress = m.front() == '\'' ? '1' : '2';
      m.remove_prefix(1);
    }
    const ArpabetEntry* entry = find_arpabet(m);
    if (entry == nullptr) continue;
    primary = primary || stress == '1';
    phones.push_back({entry, stress, is_reduced(m)});
  }
  if (!primary) {
    // CMUdict gives every content word a primary stress: promote the first secondary stress,
    // else stress the first full vowel.
    auto promoted =
        std::find_if(phones.begin(), phones.end(), [](const Phone& p) { return p.stress == '2'; });
    if (promoted == phones.end()) {
      promoted = std::find_if(phones.begin(), phones.end(), [](const Phone& p) {
        return !p.reduced && is_arpabet_vowel(p.entry->phones[0]);
      });
    }
    if (promoted != phones.end()) promoted->stress = '1';
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < phones.size(); ++i) {
    const Phone& p = phones[i];
    const bool r_follows = i + 1 < phones.size() && phones[i + 1].entry->phones[0] == "R";
    if (p.entry->phones[0] == "R" && !out.empty() &&
        (out.back() == "R" || out.back().starts_with("ER"))) {
      continue;  // eSpeak's linking r after an r-coloured vowel; CMUdict writes one R
    }
    if (r_follows && p.entry->mnemonic == "i@") {
      out.push_back(std::string("IH") + p.stress);  // "zero", "period": ɪə before r is IH
      continue;
    }
    bool first_vowel = true;
    for (std::string_view phone : p.entry->phones) {
      if (phone.empty()) break;
      std::string s(phone);
      if (is_arpabet_vowel(phone)) {
        s += first_vowel ? p.stress : '0';
        first_vowel = false;
      }
      out.push_back(std::move(s));
    }
  }
  return out;
}

}  // namespace voxd::text
