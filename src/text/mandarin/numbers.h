// Mandarin readings of the numbers in text: cardinals, decimals, dates, times, money,
// percentages, phone numbers, units and ordinals written out as the hanzi a speaker says, for the
// pronunciation lexicon that follows. Input is NFKC-normalised simplified Chinese.
#pragma once

#include <string>
#include <string_view>

namespace voxd::text::mandarin {

// Hanzi for a non-negative integer in ASCII digits, other bytes ignored ("10010" → "一万零一十",
// "2000" → "两千"); with a leading zero or over 16 digits, the digits one by one ("007" →
// "〇〇七").
std::string cardinal(std::string_view digits);

// ASCII digits read one by one, 0 → 〇 and 1 → 一 ("2024" → "二〇二四"), or with `phone` 0 → 零
// and 1 → 幺 ("110" → "幺幺零"); other bytes are copied unchanged.
std::string digit_by_digit(std::string_view digits, bool phone);

// Hanzi for ASCII digits with at most one point ("3.14" → "三点一四", "0.50" → "零点五"): the
// integer part as a cardinal, then 点 and the digits one by one, trailing zeros dropped ("12.0" →
// "十二").
std::string decimal(std::string_view digits);

// The text with its numbers, dates, times, money, percentages, phone numbers, units and
// ordinals written as the hanzi a Mandarin speaker reads (2024年3月5日 → 二〇二四年三月五日).
std::string read_numbers(std::string_view text);

}  // namespace voxd::text::mandarin
