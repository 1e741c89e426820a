#include "text/mandarin/segmenter.h"

#include <cmath>
#include <cstdint>

#include "text/mandarin/characters.h"

namespace voxd::text::mandarin {

std::vector<std::string_view> segment(std::string_view hanzi, const MandarinLexicon& lexicon) {
  const std::vector<Character> chars = characters(hanzi);
  const size_t n = chars.size();
  auto bytes_of = [&](size_t first, size_t count) {
    const char* begin = chars[first].bytes.data();
    const char* end = chars[first + count - 1].bytes.data() + chars[first + count - 1].bytes.size();
    return std::string_view(begin, static_cast<size_t>(end - begin));
  };
  // best[i]: the log probability of the best route through characters [i, n) and the length of
  // its first word.
  std::vector<double> best(n + 1, 0.0);
  std::vector<size_t> first_word(n + 1, 1);
  for (size_t i = n; i-- > 0;) {
    const size_t longest = std::min(lexicon.longest_word(chars[i].bytes), n - i);
    best[i] = -INFINITY;
    for (size_t length = 1; length <= longest; ++length) {
      const MandarinLexicon::Word* word = lexicon.word(bytes_of(i, length));
      const uint32_t count = word ? word->count : 0;
      if (count == 0 && length > 1) continue;
      const double score = std::log(static_cast<double>(std::max<uint32_t>(count, 1))) -
                           lexicon.log_total() + best[i + length];
      if (score >= best[i]) {  // ties go to the longer word, as in jieba
        best[i] = score;
        first_word[i] = length;
      }
    }
  }
  std::vector<std::string_view> words;
  for (size_t i = 0; i < n; i += first_word[i]) words.push_back(bytes_of(i, first_word[i]));
  return words;
}

}  // namespace voxd::text::mandarin
