// English number words for the normaliser: cardinals, ordinals and years.
#pragma once

#include <string>
#include <string_view>

namespace voxd::text {

// Words for a non-negative integer written as ASCII digits ("1234" → "one thousand two hundred
// thirty-four"); leading zeros are ignored; over 36 digits it reads the digits one by one.
std::string cardinal_words(std::string_view digits);

// Ordinal words for ASCII digits ("21" → "twenty-first").
std::string ordinal_words(std::string_view digits);

// Words for a four-digit year as spoken ("1984" → "nineteen eighty-four", "2005" → "two
// thousand five", "1900" → "nineteen hundred", "2010" → "twenty ten").
std::string year_words(std::string_view digits);

// The digits read one by one ("007" → "zero zero seven").
std::string digit_words(std::string_view digits);

// The plural of the last word of `words` ("nineteen ninety" → "nineteen nineties").
std::string plural_words(std::string words);

}  // namespace voxd::text
