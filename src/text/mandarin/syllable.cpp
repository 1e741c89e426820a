#include "text/mandarin/syllable.h"

namespace voxd::text::mandarin {

std::optional<Syllable> parse_syllable(std::string_view written) {
  if (written.size() < 2) return std::nullopt;
  const char tone = written.back();
  if (tone < '1' || tone > '5') return std::nullopt;
  Syllable syllable{.letters = {}, .tone = tone - '0'};
  const std::string_view letters = written.substr(0, written.size() - 1);
  for (size_t i = 0; i < letters.size(); ++i) {
    const char c = letters[i];
    if (c >= 'a' && c <= 'z') {
      syllable.letters += c;
    } else if (c >= 'A' && c <= 'Z') {
      syllable.letters += static_cast<char>(c - 'A' + 'a');
    } else if (letters.substr(i, 2) == "\xC3\xBC" || letters.substr(i, 2) == "\xC3\x9C") {
      syllable.letters += 'v';  // ü, Ü
      ++i;
    } else if (c == ':' && !syllable.letters.empty() && syllable.letters.back() == 'u') {
      syllable.letters.back() = 'v';  // u: as in CC-CEDICT
    } else {
      return std::nullopt;
    }
  }
  if (syllable.letters.empty()) return std::nullopt;
  return syllable;
}

std::string_view without_erhua(std::string_view letters) {
  if (letters.size() > 2 && letters.back() == 'r') return letters.substr(0, letters.size() - 1);
  return letters;
}

}  // namespace voxd::text::mandarin
