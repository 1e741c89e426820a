// A Mandarin syllable as voxd writes pinyin: letters and a tone digit ("hang2", "lv4", "huar1";
// ü written v, 5 the neutral tone, a final r for erhua).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace voxd::text::mandarin {

struct Syllable {
  std::string letters;  // lowercase a-z, without the tone
  int tone = 5;         // 1-4, or 5 for the neutral tone

  std::string text() const { return letters + static_cast<char>('0' + tone); }
  bool operator==(const Syllable&) const = default;
};

// "hang2" -> {hang, 2}; "lü4" and "lu:4" -> {lv, 4}; upper case folded. nullopt unless the
// syllable is letters followed by one tone digit 1-5 (whether the letters are Mandarin is the
// lexicon's question: MandarinLexicon::is_syllable).
std::optional<Syllable> parse_syllable(std::string_view written);

// The letters without an erhua r ("huar" -> "hua"); the letters themselves when there is none
// ("er" stays "er").
std::string_view without_erhua(std::string_view letters);

}  // namespace voxd::text::mandarin
