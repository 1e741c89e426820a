#include "text/sentences.h"

#include <algorithm>

#include "core/error.h"
#include "text/ascii.h"

namespace voxd::text {
namespace {

using ascii::is_space;

bool is_terminal(char c) {
  return c == '.' || c == '!' || c == '?';
}
bool is_closing(char c) {
  return c == '"' || c == '\'' || c == ')' || c == ']' || c == '}';
}
bool is_continuation_byte(char c) {
  return (static_cast<unsigned char>(c) & 0xC0) == 0x80;
}

// Full-width punctuation (UTF-8, three bytes each): what ends a Chinese sentence with no space
// after it, what may close it, and where a long one may be cut.
constexpr std::string_view kWideTerminals[] = {"\u3002", "\uFF01", "\uFF1F"};          // 。！？
constexpr std::string_view kWideClosing[] = {"\u201D", "\u300D", "\u300F", "\uFF09"};  // ”」』）
constexpr std::string_view kWidePauses[] = {"\uFF0C", "\u3001", "\uFF1B", "\uFF1A"};  // ，、；：

// The length of the member of `set` that `text` has at `at`, or 0.
template <size_t N>
size_t match_at(std::string_view text, size_t at, const std::string_view (&set)[N]) {
  for (std::string_view mark : set) {
    if (text.substr(at, mark.size()) == mark) return mark.size();
  }
  return 0;
}

// Whether `text` ends at `end` with a member of `set`.
template <size_t N>
bool ends_with_at(std::string_view text, size_t end, const std::string_view (&set)[N]) {
  for (std::string_view mark : set) {
    if (end >= mark.size() && text.substr(end - mark.size(), mark.size()) == mark) return true;
  }
  return false;
}

// Appends `s` (already trimmed, maybe over-long) to `out` in pieces of at most `max` bytes.
void add_sentence(std::string_view s, size_t max, std::vector<std::string>& out) {
  while (s.size() > max) {
    size_t cut = std::string_view::npos;
    size_t space = std::string_view::npos;
    // A cut at `j` keeps s[0, j); s[j] may be whitespace that is then dropped.
    for (size_t j = max; j > 0; --j) {
      if (space == std::string_view::npos && is_space(s[j])) space = j;
      const char prev = s[j - 1];
      if ((prev == ',' || prev == ';' || prev == ':' || ends_with_at(s, j, kWidePauses)) &&
          j >= max / 2) {
        cut = j;
        break;
      }
      if (j < max / 2 && space != std::string_view::npos) break;
    }
    if (cut == std::string_view::npos) cut = space;
    if (cut == std::string_view::npos || cut == 0) {
      cut = max;
      while (cut > 0 && is_continuation_byte(s[cut])) --cut;
      if (cut == 0) {
        cut = 1;
        while (cut < s.size() && is_continuation_byte(s[cut])) ++cut;
      }
    }
    std::string_view piece = s.substr(0, cut);
    while (!piece.empty() && is_space(piece.back())) piece.remove_suffix(1);
    if (!piece.empty()) out.emplace_back(piece);
    s.remove_prefix(cut);
    while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  }
  if (!s.empty()) out.emplace_back(s);
}

}  // namespace

std::vector<std::string> split_sentences(std::string_view text, size_t max_chars) {
  if (max_chars == 0) throw Error("split_sentences: max_chars must be at least 1");
  std::vector<std::string> out;
  size_t start = 0;
  auto finish = [&](size_t end) {
    std::string_view s = text.substr(start, end - start);
    while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
    while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
    add_sentence(s, max_chars, out);
    start = end;
  };
  for (size_t i = 0; i < text.size(); ++i) {
    if (const size_t wide = match_at(text, i, kWideTerminals); wide > 0) {
      size_t end = i + wide;
      for (size_t more = 1; more > 0; end += more) {
        more = std::max(match_at(text, end, kWideTerminals), match_at(text, end, kWideClosing));
      }
      finish(end);
      i = end - 1;
    } else if (text[i] == '\n') {
      finish(i);
    } else if (is_terminal(text[i])) {
      size_t end = i + 1;
      while (end < text.size() && (is_terminal(text[end]) || is_closing(text[end]))) ++end;
      if (end == text.size() || is_space(text[end])) {
        finish(end);
        i = end - 1;
      }
    }
  }
  finish(text.size());
  return out;
}

}  // namespace voxd::text
