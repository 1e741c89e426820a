#include "families/sambert/pinyin_symbols.h"

#include <utility>
#include <vector>

#include "core/error.h"

namespace voxd::sambert {
namespace {

using text::mandarin::Break;
using text::mandarin::ReadSentence;
using text::mandarin::ReadWord;
using text::mandarin::Syllable;

// Initials, the two-letter ones first.
constexpr std::array<std::string_view, 23> kInitials = {"zh", "ch", "sh", "b", "p", "m", "f", "d",
                                                        "t",  "n",  "l",  "g", "k", "h", "j", "q",
                                                        "x",  "r",  "z",  "c", "s", "y", "w"};

// The erhua finals of KAN-TTS's PinYin phone set (and er, zher4's); another final keeps its
// plain phone.
constexpr std::array<std::string_view, 35> kErhuaFinals = {
    "air",  "angr", "anr",  "aor", "ar",   "eir",  "engr",  "enr",  "iangr",
    "ianr", "iaor", "iar",  "ier", "ihr",  "iir",  "ingr",  "inr",  "iongr",
    "iour", "ir",   "ongr", "or",  "our",  "uair", "uangr", "uanr", "uar",
    "ueir", "uenr", "uor",  "ur",  "vanr", "ver",  "vnr",   "vr"};

// Syllables KAN-TTS's map has no key for, and the ones read in their place.
constexpr std::array<std::pair<std::string_view, std::string_view>, 10> kNearest = {
    {{"ng", "en"},
     {"n", "en"},
     {"m", "mu"},
     {"hm", "mu"},
     {"hng", "heng"},
     {"rua", "ruo"},
     {"cei", "ci"},
     {"sei", "sai"},
     {"yai", "ya"},
     {"r", "er"}}};

// Latin letters as Chinese speakers name them.
constexpr std::array<std::string_view, 26> kLetterNames = {
    "ei1",      "bi4",          "xi1",         "di4",    "yi1",     "ai4 fu2", "ji2",
    "ai4 chi3", "ai4",          "jie2",        "kai1",   "ai4 le4", "ai4 mu3", "en1",
    "ou1",      "pi1",          "qiu1",        "a1 er3", "ai4 si1", "ti2",     "you1",
    "wei2",     "da2 bu4 liu1", "ai4 ke4 si1", "wai1",   "zei2"};

template <size_t N>
bool listed(const std::array<std::string_view, N>& list, std::string_view value) {
  for (std::string_view item : list) {
    if (item == value) return true;
  }
  return false;
}

std::string final_of(std::string_view initial, std::string_view rest) {
  if (rest == "i" && (initial == "zh" || initial == "ch" || initial == "sh" || initial == "r")) {
    return "ih";
  }
  if (rest == "i" && (initial == "z" || initial == "c" || initial == "s")) return "ii";
  if (initial == "y" || initial == "w") return std::string(rest);
  if (rest == "iu") return "iou";
  if (rest == "ui") return "uei";
  if (rest == "un") return "uen";
  return std::string(rest);
}

std::vector<Syllable> letter_syllables(std::string_view word) {
  std::vector<Syllable> out;
  for (const char c : word) {
    const char lower = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
    if (lower < 'a' || lower > 'z') continue;
    std::string_view names = kLetterNames[static_cast<size_t>(lower - 'a')];
    while (!names.empty()) {
      const size_t space = names.find(' ');
      const std::string_view name = names.substr(0, space);
      out.push_back(*text::mandarin::parse_syllable(name));
      names.remove_prefix(space == std::string_view::npos ? names.size() : space + 1);
    }
  }
  return out;
}

std::string token(std::string_view sy, std::string_view tone, std::string_view syllable_flag,
                  std::string_view word_flag, std::string_view emotion, std::string_view speaker) {
  std::string out = "{";
  out.append(sy).append("$").append(tone).append("$").append(syllable_flag).append("$");
  out.append(word_flag).append("$").append(emotion).append("$").append(speaker).append("}");
  return out;
}

}  // namespace

std::array<std::string, 2> kantts_phones(const Syllable& syllable) {
  std::string letters = syllable.letters;
  for (const char c : letters) {
    if (c < 'a' || c > 'z') {
      std::string message = "'";
      message.append(syllable.text()).append("' is not a pinyin syllable");
      throw InputError(message);
    }
  }
  const bool erhua = letters.size() > 2 && letters.back() == 'r';
  if (erhua) letters.pop_back();
  for (const auto& [missing, nearest] : kNearest) {
    if (letters == missing) letters = std::string(nearest);
  }
  // j, q, x and y spell ü as u: ju -> jv, yuan -> yvan.
  if (letters.size() > 1 && letters[1] == 'u' &&
      std::string_view("jqxy").find(letters[0]) != std::string_view::npos) {
    letters[1] = 'v';
  }
  std::string_view initial;
  for (std::string_view candidate : kInitials) {
    if (letters.size() > candidate.size() && letters.starts_with(candidate)) {
      initial = candidate;
      break;
    }
  }
  // A syllable without an initial takes ga, ge or go by its first letter.
  const char* zero_initial = letters.front() == 'a' ? "ga" : letters.front() == 'o' ? "go" : "ge";
  std::string first = initial.empty()  ? zero_initial
                      : initial == "x" ? "xx_c"
                                       : std::string(initial).append("_c");
  std::string final_phone =
      initial.empty() ? letters
                      : final_of(initial, std::string_view(letters).substr(initial.size()));
  if (erhua) {
    std::string with_r = final_phone;
    with_r.push_back('r');
    if (with_r == "er" || listed(kErhuaFinals, with_r)) final_phone = std::move(with_r);
  }
  final_phone.append("_c");
  return {first, final_phone};
}

std::string kantts_symbols(const ReadSentence& sentence, std::string_view emotion,
                           std::string_view speaker) {
  std::vector<std::string> tokens;
  // Phones of the prosodic word being written, with their tones and syllable flags.
  struct Phone {
    std::string sy;
    std::string tone;
    const char* syllable_flag;
  };
  std::vector<Phone> pending;
  auto flush = [&](Break after) {
    for (size_t i = 0; i < pending.size(); ++i) {
      const char* word_flag = i == 0                    ? "word_begin"
                              : i + 1 == pending.size() ? "word_end"
                                                        : "word_middle";
      tokens.push_back(token(pending[i].sy, pending[i].tone, pending[i].syllable_flag, word_flag,
                             emotion, speaker));
    }
    if (!pending.empty() && after != Break::kNone) {
      std::string mark = "#";
      mark.push_back(static_cast<char>('0' + static_cast<int>(after)));
      tokens.push_back(token(mark, "tone_none", "s_none", "word_none", emotion, speaker));
    }
    pending.clear();
  };
  for (const ReadWord& word : sentence.words) {
    const std::vector<Syllable> syllables =
        word.latin() ? letter_syllables(word.text) : word.syllables;
    for (const Syllable& syllable : syllables) {
      const std::array<std::string, 2> phones = kantts_phones(syllable);
      std::string tone = "tone";
      tone.push_back(static_cast<char>('0' + syllable.tone));
      pending.push_back({phones[0], tone, "s_begin"});
      pending.push_back({phones[1], tone, "s_end"});
    }
    if (word.after != Break::kNone) flush(word.after);
  }
  flush(Break::kSentence);
  std::string out;
  for (const std::string& t : tokens) {
    if (!out.empty()) out.push_back(' ');
    out.append(t);
  }
  return out;
}

}  // namespace voxd::sambert
