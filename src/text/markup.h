// Markup in user text — Markdown, HTML and an SSML subset — turned into the plain text to speak,
// with the pauses and speaking rates SSML asks for (docs/text-frontend.md lists what is honoured).
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

namespace voxd::text {

// A stretch of plain text spoken at one rate, and the silence after it.
struct Span {
  std::string text;        // markup removed, entities decoded; "\n" ends a sentence
  float rate = 1.0f;       // speed multiplier from <prosody rate>
  int pause_after_ms = 0;  // from <break>s, together at most kMaxBreakMs
};

// The longest <break> honoured (and the longest silence breaks in a row make), and the range of
// <prosody rate> multipliers.
inline constexpr int kMaxBreakMs = 10000;
inline constexpr float kMinRate = 0.25f;
inline constexpr float kMaxRate = 4.0f;

// A pause of `pause_ms` followed by one of `more_ms` (both in [0, kMaxBreakMs]): breaks in a row
// add up, to at most kMaxBreakMs.
inline int add_pause(int pause_ms, int more_ms) {
  return std::min(pause_ms + more_ms, kMaxBreakMs);
}

// Splits `text` into spans at each <break> and each change of <prosody rate>. Text that starts
// with <speak> (or <?xml) is an SSML document; anything else may hold Markdown, whose markup is
// removed first, and HTML or SSML tags. Tags are never read: unknown ones and malformed ones
// (an unterminated "<break time=") are dropped; a '<' not followed by a tag name ("a < b") is
// text. <say-as> is read in English words when `language` is English, else left as written.
// InputError for a <break> or <prosody rate> value it cannot use, naming the value and the
// accepted forms. Spans with no text are left out, their pause added to the span before.
std::vector<Span> parse_markup(std::string_view text, const std::string& language);

}  // namespace voxd::text
