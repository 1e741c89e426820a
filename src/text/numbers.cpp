#include "text/numbers.h"

#include <array>

#include "core/error.h"

namespace voxd::text {
namespace {

constexpr std::array<std::string_view, 20> kOnes{
    "zero",     "one",     "two",     "three",     "four",     "five",    "six",
    "seven",    "eight",   "nine",    "ten",       "eleven",   "twelve",  "thirteen",
    "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"};
constexpr std::array<std::string_view, 10> kTens{"",      "",      "twenty",  "thirty", "forty",
                                                 "fifty", "sixty", "seventy", "eighty", "ninety"};
constexpr std::array<std::string_view, 12> kScales{
    "",           "thousand",   "million",   "billion",   "trillion", "quadrillion", "quintillion",
    "sextillion", "septillion", "octillion", "nonillion", "decillion"};

void append(std::string& out, std::string_view word) {
  if (!out.empty()) out += ' ';
  out += word;
}

// Words for 1..999.
std::string below_thousand(int n) {
  std::string out;
  if (n >= 100) {
    append(out, kOnes[static_cast<size_t>(n / 100)]);
    append(out, "hundred");
    n %= 100;
  }
  if (n >= 20) {
    std::string tens(kTens[static_cast<size_t>(n / 10)]);
    if (n % 10 != 0) {
      tens += '-';
      tens += kOnes[static_cast<size_t>(n % 10)];
    }
    append(out, tens);
  } else if (n > 0) {
    append(out, kOnes[static_cast<size_t>(n)]);
  }
  return out;
}

int to_int(std::string_view digits) {
  int n = 0;
  for (char c : digits) n = n * 10 + (c - '0');
  return n;
}

void check_digits(std::string_view digits) {
  VOXD_CHECK(!digits.empty(), "number has no digits");
  for (char c : digits) VOXD_CHECK(c >= '0' && c <= '9', "number has a non-digit");
}

}  // namespace

std::string digit_words(std::string_view digits) {
  check_digits(digits);
  std::string out;
  for (char c : digits) append(out, kOnes[static_cast<size_t>(c - '0')]);
  return out;
}

std::string cardinal_words(std::string_view digits) {
  check_digits(digits);
  while (digits.size() > 1 && digits.front() == '0') digits.remove_prefix(1);
  if (digits.size() > 3 * kScales.size()) return digit_words(digits);
  if (digits == "0") return "zero";
  std::string out;
  const size_t groups = (digits.size() + 2) / 3;
  size_t pos = 0;
  for (size_t g = groups; g-- > 0;) {
    const size_t len = digits.size() - pos - 3 * g;
    const int value = to_int(digits.substr(pos, len));
    pos += len;
    if (value == 0) continue;
    append(out, below_thousand(value));
    if (g > 0) append(out, kScales[g]);
  }
  return out;
}

std::string ordinal_words(std::string_view digits) {
  std::string words = cardinal_words(digits);
  const size_t start = words.find_last_of(" -") + 1;
  const std::string last = words.substr(start);
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 6> kIrregular{{
      {"one", "first"},
      {"two", "second"},
      {"three", "third"},
      {"five", "fifth"},
      {"eight", "eighth"},
      {"nine", "ninth"},
  }};
  for (const auto& [cardinal, ordinal] : kIrregular) {
    if (last == cardinal) return words.substr(0, start) + std::string(ordinal);
  }
  if (last == "twelve") return words.substr(0, start) + "twelfth";
  if (last.back() == 'y') return words.substr(0, words.size() - 1) + "ieth";
  return words + "th";
}

std::string year_words(std::string_view digits) {
  check_digits(digits);
  VOXD_CHECK(digits.size() == 4, "a year has four digits");
  const int year = to_int(digits);
  const int high = year / 100;
  const int low = year % 100;
  if (year % 1000 == 0 || (high % 10 == 0 && low < 10)) return cardinal_words(digits);
  if (low == 0) return below_thousand(high) + " hundred";
  std::string out = below_thousand(high);
  if (low < 10) append(out, "oh");
  append(out, below_thousand(low));
  return out;
}

std::string plural_words(std::string words) {
  if (words.empty()) return words;
  if (words.back() == 'y') {
    words.back() = 'i';
    return words + "es";
  }
  if (words.back() == 'x') return words + "es";
  return words + "s";
}

}  // namespace voxd::text
