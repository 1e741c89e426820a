// Text normalisation before phonemisation: Unicode clean-up for every language, and for English
// numbers, currency, times, units and abbreviations written out as words.
#pragma once

#include <string>
#include <string_view>

namespace voxd::text {

// InputError naming the byte offset of the first bad byte if `text` is not valid UTF-8, or if
// it is longer than 2 GiB.
void check_utf8(std::string_view text);

// Unicode clean-up of UTF-8 `text`: NFKC folding, typographic quotes/dashes to ASCII, control
// characters, emoji and other symbols dropped, whitespace runs collapsed to one space (to one
// "\n" when they hold a line break), ends trimmed. InputError naming the byte offset if `text`
// is not valid UTF-8.
std::string clean_unicode(std::string_view text);

// True for "en" and "en-*" (or "en_*") languages, which get the English readings.
bool is_english(const std::string& language);

// clean_unicode, then, when `language` is English ("en" or "en-*"), numbers, currency,
// percentages, times, ordinals, years, units and common abbreviations spelled out in words
// ("Dr. Smith paid $5.50 on May 21st" → "doctor Smith paid five dollars fifty cents on May
// twenty-first"). Other languages get the clean-up only.
std::string normalize(std::string_view text, const std::string& language = "en");

}  // namespace voxd::text
