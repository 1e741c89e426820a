#include "text/mandarin/sandhi.h"

#include <array>
#include <string_view>

namespace voxd::text::mandarin {
namespace {

constexpr std::array<std::string_view, 7> kParticleTags = {"uj", "ul", "uz", "ug", "uv", "ud", "y"};
// Reduplications of these parts of speech keep their tones (慢慢 adverb, 天天 time word).
constexpr std::array<std::string_view, 9> kFullToneReduplications = {"a", "ad", "an", "d", "z",
                                                                     "t", "m",  "q",  "mq"};
constexpr std::string_view kDigits = "〇零一二三四五六七八九十两幺";
constexpr std::string_view kNumberChars = "〇零一二三四五六七八九十两百千万亿点负";
constexpr std::string_view kPlaces = "十百千万亿点";
constexpr std::string_view kLargePlaces = "百千万亿";
// 一 read yi1 before these: an ordinal (一月, 一号, 一楼, 一班).
constexpr std::string_view kOrdinalFollowers = "月号楼班";

template <size_t N>
bool one_of(const std::array<std::string_view, N>& list, std::string_view value) {
  for (std::string_view item : list) {
    if (item == value) return true;
  }
  return false;
}

// Whether `hanzi` is one character of `set` (a string of three-byte characters).
bool in_set(std::string_view set, std::string_view hanzi) {
  if (hanzi.size() != 3) return false;
  for (size_t at = 0; at + 3 <= set.size(); at += 3) {
    if (set.substr(at, 3) == hanzi) return true;
  }
  return false;
}

bool is_particle(const ReadWord& word) {
  return word.syllables.size() == 1 && one_of(kParticleTags, word.tag);
}

bool is_number(const ReadWord& word) {
  if (word.latin()) return false;
  for (const std::string& hanzi : word.hanzi) {
    if (!in_set(kNumberChars, hanzi)) return false;
  }
  return true;
}

// Monosyllabic pronouns and adverbs (我, 你, 很, 也, 都).
bool leans_on_next(const ReadWord& word) {
  return word.syllables.size() == 1 && !word.tag.empty() &&
         (word.tag.front() == 'r' || word.tag == "d" || word.tag == "zg");
}

bool is_verb(const ReadWord& word) {
  return !word.tag.empty() && word.tag.front() == 'v';
}

bool is_modifier(const ReadWord& word) {
  return word.tag == "a" || word.tag == "ad" || word.tag == "d" || word.tag == "z" ||
         (word.hanzi.size() == 2 && word.hanzi[0] == word.hanzi[1]);
}

// One syllable of the sentence: its word and its place in it.
struct Slot {
  ReadWord* word;
  size_t index;
  Syllable& syllable() const { return word->syllables[index]; }
  const std::string& hanzi() const { return word->hanzi[index]; }
  bool given() const { return word->given[index]; }
};

std::vector<Slot> slots_of(std::vector<ReadWord>& words) {
  std::vector<Slot> slots;
  for (ReadWord& word : words) {
    for (size_t i = 0; i < word.syllables.size(); ++i) slots.push_back({&word, i});
  }
  return slots;
}

// The neutral tone of particles and of reduplicated nouns and verbs.
void neutral_tones(std::vector<ReadWord>& words) {
  for (size_t w = 0; w < words.size(); ++w) {
    ReadWord& word = words[w];
    if (word.latin()) continue;
    if (is_particle(word) && !word.given[0]) {
      const ReadWord* before = w > 0 && !words[w - 1].latin() ? &words[w - 1] : nullptr;
      Syllable& syllable = word.syllables[0];
      const std::string& hanzi = word.hanzi[0];
      if (hanzi == "地" || hanzi == "得") {
        // Particles after a modifier (慢慢地) or, 得, after a verb or adjective (跑得快).
        const bool particle =
            before && (is_modifier(*before) || (hanzi == "得" && is_verb(*before)));
        if (particle) syllable = {.letters = "de", .tone = 5};
      } else if (hanzi == "过" || hanzi == "着") {
        if (before && is_verb(*before)) syllable.tone = 5;
      } else {
        syllable.tone = 5;
      }
      continue;
    }
    if (word.syllables.size() == 2 && word.hanzi[0] == word.hanzi[1] && !word.from_phrase &&
        !word.given[1] && !one_of(kFullToneReduplications, word.tag)) {
      word.syllables[1].tone = 5;
    }
  }
}

// Readings the neighbours decide: 为 wei2 as a copula (约为, 选为; wei4 "for" next to a pronoun,
// 为他), 长 alone, and the measure word 只 zhi1 after a numeral (一只, 几只).
void context_readings(std::vector<ReadWord>& words, std::vector<Slot>& slots) {
  for (size_t w = 0; w < words.size(); ++w) {
    ReadWord& word = words[w];
    if (word.syllables.size() != 1 || word.given[0] || word.hanzi[0] != "为") continue;
    const ReadWord* before = w > 0 && words[w - 1].after <= Break::kWord && !words[w - 1].latin()
                                 ? &words[w - 1]
                                 : nullptr;
    const ReadWord* next =
        w + 1 < words.size() && word.after <= Break::kWord ? &words[w + 1] : nullptr;
    const auto pronoun = [](const ReadWord* neighbour) {
      return neighbour && !neighbour->tag.empty() && neighbour->tag.front() == 'r';
    };
    // A verb ending in 为 the lexicon does not read (选为) has the copula too.
    if (before && !pronoun(before) && !pronoun(next)) {
      word.syllables[0] = {.letters = "wei", .tone = 2};
    }
  }
  for (ReadWord& word : words) {
    const size_t last = word.syllables.size() - 1;
    if (word.syllables.size() > 1 && word.hanzi[last] == "为" && !word.from_phrase &&
        !word.given[last] && !word.tag.empty() && word.tag.front() == 'v') {
      word.syllables[last] = {.letters = "wei", .tone = 2};
    }
  }
  // 长 alone is the adjective cháng (又长又黑, 长50米) but for the verb zhǎng before 了, 着, 过,
  // 大 and 高 (长了, 长高).
  for (size_t w = 0; w < words.size(); ++w) {
    ReadWord& word = words[w];
    if (word.syllables.size() != 1 || word.given[0] || word.hanzi[0] != "长") continue;
    const std::string next =
        w + 1 < words.size() && word.after <= Break::kWord && !words[w + 1].latin()
            ? words[w + 1].hanzi.front()
            : std::string();
    const bool verb = next == "了" || next == "着" || next == "过" || next == "大" || next == "高";
    word.syllables[0] =
        verb ? Syllable{.letters = "zhang", .tone = 3} : Syllable{.letters = "chang", .tone = 2};
  }
  for (size_t i = 1; i < slots.size(); ++i) {
    const Slot& slot = slots[i];
    const std::string& before = slots[i - 1].hanzi();
    if (slot.hanzi() == "只" && !slot.given() &&
        (in_set(kDigits, before) || before == "几" || before == "每")) {
      slot.syllable() = {.letters = "zhi", .tone = 1};
    }
  }
}

// Whether the break after slot `at` ends the clause (no sandhi across it).
bool clause_ends_after(const std::vector<Slot>& slots, size_t at) {
  const Slot& slot = slots[at];
  return slot.index + 1 == slot.word->syllables.size() && slot.word->after >= Break::kShort;
}

// 不 and 一.
void yi_and_bu(std::vector<Slot>& slots, const MandarinLexicon& lexicon) {
  for (size_t i = 0; i < slots.size(); ++i) {
    const Slot& slot = slots[i];
    if (slot.given()) continue;
    const bool bu = slot.hanzi() == "不" && slot.syllable().letters == "bu";
    const bool yi = slot.hanzi() == "一" && slot.syllable().letters == "yi";
    if (!bu && !yi) continue;
    const Slot* before = i > 0 && !clause_ends_after(slots, i - 1) ? &slots[i - 1] : nullptr;
    const Slot* next =
        i + 1 < slots.size() && !clause_ends_after(slots, i) ? &slots[i + 1] : nullptr;
    int& tone = slot.syllable().tone;
    if (before && next && before->hanzi() == next->hanzi()) {
      tone = 5;  // 是不是, 看一看
      continue;
    }
    // The tone of what follows as the lexicon has it (a neutral 一下 still reads xia4 here).
    int next_tone = next ? next->syllable().tone : 0;
    if (next_tone == 5) {
      const std::vector<Syllable>* readings = lexicon.char_readings(next->hanzi());
      if (readings) next_tone = readings->front().tone;
    }
    if (bu) {
      tone = next_tone == 4 ? 2 : 4;
      continue;
    }
    const bool word_final =
        slot.word->syllables.size() > 1 && slot.index + 1 == slot.word->syllables.size();
    // 第一, 十一, 一二三, 一百一十; but 第一百 and 十一万 read 一 before 百, 千, 万 and 亿 as
    // any 一.
    const bool before_place = next && in_set(kLargePlaces, next->hanzi());
    const bool numeral =
        !before_place &&
        ((before && (before->hanzi() == "第" || in_set(kDigits, before->hanzi()))) ||
         (next && in_set(kDigits, next->hanzi())));
    const bool ordinal = next && (in_set(kOrdinalFollowers, next->hanzi()) ||
                                  (next->hanzi() == "日" && before && before->hanzi() == "月"));
    if (!next || (word_final && !before_place) || numeral || ordinal) {
      tone = 1;
    } else {
      tone = next_tone == 4 ? 2 : 4;
    }
  }
}

bool both_third(const Syllable& left, const Syllable& right) {
  return left.tone == 3 && right.tone == 3;
}

// 3-3 -> 2-3 between syllables `left` and `left + 1` of `word`, unless the user gave the first
// or both are digits read one by one (一九九九年).
void third_pair(ReadWord& word, size_t left) {
  const bool digits = in_set(kDigits, word.hanzi[left]) && in_set(kDigits, word.hanzi[left + 1]);
  if (!word.given[left] && !digits && both_third(word.syllables[left], word.syllables[left + 1])) {
    word.syllables[left].tone = 2;
  }
}

// Third-tone sandhi inside one word, by its structure: 展览馆 (2+1) 2 2 3, 小老虎 (1+2) 3 2 3,
// longer words in pairs.
void third_tones_in_word(ReadWord& word, const MandarinLexicon& lexicon) {
  const size_t n = word.syllables.size();
  if (n < 2) return;
  if (n == 3) {
    const MandarinLexicon::Word* head = lexicon.word(word.hanzi[0] + word.hanzi[1]);
    if (head && head->count > 0) {
      third_pair(word, 0);
      third_pair(word, 1);
    } else {
      third_pair(word, 1);
      third_pair(word, 0);
    }
    return;
  }
  for (size_t left = 0; left + 1 < n; left += 2) third_pair(word, left);
  for (size_t left = 1; left + 1 < n; left += 2) third_pair(word, left);
}

// Third-tone sandhi inside a number, each digit with its place (五百五十五 wu2 bai3 wu3 shi2
// wu3); digits read one by one (一九九九) keep their tones.
void third_tones_in_number(ReadWord& word) {
  for (size_t i = 0; i + 1 < word.syllables.size(); ++i) {
    if (in_set(kDigits, word.hanzi[i]) && in_set(kPlaces, word.hanzi[i + 1])) third_pair(word, i);
  }
}

// Third-tone sandhi in the prosodic word of words [first, last]: inside each word, then between
// words, but not into or out of a number.
void third_tones(std::vector<ReadWord>& words, size_t first, size_t last,
                 const MandarinLexicon& lexicon) {
  for (size_t w = first; w <= last; ++w) {
    if (is_number(words[w])) {
      third_tones_in_number(words[w]);
    } else {
      third_tones_in_word(words[w], lexicon);
    }
  }
  for (size_t w = first; w < last; ++w) {
    ReadWord& left = words[w];
    const ReadWord& right = words[w + 1];
    if (left.latin() || right.latin() || is_number(left) || is_number(right)) continue;
    const size_t end = left.syllables.size() - 1;
    if (!left.given[end] && both_third(left.syllables[end], right.syllables.front())) {
      left.syllables[end].tone = 2;
    }
  }
}

}  // namespace

void group_prosodic_words(std::vector<ReadWord>& words) {
  size_t group_syllables = 0;
  for (size_t w = 0; w < words.size(); ++w) {
    const ReadWord& word = words[w];
    const size_t syllables = word.syllables.size();
    if (w > 0) {
      ReadWord& before = words[w - 1];
      const bool joinable = before.after == Break::kWord && !before.latin() && !word.latin();
      // A monosyllabic pronoun or adverb leans on what follows (你想去, 很好), so the group
      // before it stops short of taking it alone.
      const bool leans_forward = w + 1 < words.size() && word.after == Break::kWord &&
                                 leans_on_next(word) && !words[w + 1].latin() &&
                                 !is_particle(words[w + 1]);
      const bool joins =
          joinable && (is_particle(word) || (is_number(before) && is_number(word)) ||
                       ((group_syllables == 1 || (syllables == 1 && !leans_forward)) &&
                        group_syllables + syllables <= 3));
      if (joins) {
        before.after = Break::kNone;
        group_syllables += syllables;
        continue;
      }
    }
    group_syllables = syllables;
  }
}

void apply_tone_sandhi(std::vector<ReadWord>& words, const MandarinLexicon& lexicon) {
  neutral_tones(words);
  std::vector<Slot> slots = slots_of(words);
  context_readings(words, slots);
  yi_and_bu(slots, lexicon);
  size_t first = 0;
  for (size_t w = 0; w < words.size(); ++w) {
    if (words[w].after == Break::kNone && w + 1 < words.size()) continue;
    third_tones(words, first, w, lexicon);
    first = w + 1;
  }
}

}  // namespace voxd::text::mandarin
