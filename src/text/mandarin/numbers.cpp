#include "text/mandarin/numbers.h"

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/mandarin/characters.h"

namespace voxd::text::mandarin {
namespace {

constexpr size_t kMaxCardinalDigits = 16;

constexpr std::array<std::string_view, 10> kCardinalDigits{"零", "一", "二", "三", "四",
                                                           "五", "六", "七", "八", "九"};
constexpr std::array<std::string_view, 10> kSpelledDigits{"〇", "一", "二", "三", "四",
                                                          "五", "六", "七", "八", "九"};
constexpr std::array<std::string_view, 10> kPhoneDigits{"零", "幺", "二", "三", "四",
                                                        "五", "六", "七", "八", "九"};
constexpr std::array<std::string_view, 4> kSmallUnits{"", "十", "百", "千"};

// Chinese measure words after which a lone 2 is read 两 (元 too: "¥2" and "2元" both say 两元).
constexpr std::array<std::string_view, 56> kMeasureWords{
    "小时", "分钟", "秒钟", "个", "只", "本", "张", "条", "位", "次", "天", "年", "岁", "件",
    "台",   "辆",   "家",   "种", "份", "块", "斤", "杯", "瓶", "双", "对", "名", "遍", "周",
    "片",   "首",   "部",   "层", "间", "场", "节", "门", "句", "颗", "棵", "匹", "头", "口",
    "碗",   "盒",   "包",   "套", "趟", "笔", "项", "万", "千", "亿", "点", "倍", "人", "元"};

// A Latin or symbol word right after a number, and the hanzi it is read as.
struct UnitWord {
  std::string_view spelling;
  std::string_view hanzi;
  bool liang;     // a lone 2 before it reads 两
  bool currency;  // a currency code rather than a unit
  bool strict;    // only when nothing word-like follows and no space comes before it ("5A")
};

constexpr std::array<UnitWord, 58> kUnitWords{{
    {"km/h", "公里每小时", true, false, false},
    {"m/s", "米每秒", true, false, false},
    {"km²", "平方公里", false, false, false},
    {"km2", "平方公里", false, false, false},
    {"m²", "平方米", false, false, false},
    {"m2", "平方米", false, false, false},
    {"㎡", "平方米", false, false, false},
    {"m³", "立方米", false, false, false},
    {"m3", "立方米", false, false, false},
    {"kg", "千克", true, false, false},
    {"mg", "毫克", false, false, false},
    {"g", "克", true, false, false},
    {"t", "吨", true, false, false},
    {"km", "公里", true, false, false},
    {"cm", "厘米", true, false, false},
    {"mm", "毫米", true, false, false},
    {"m", "米", true, false, false},
    {"ml", "毫升", true, false, false},
    {"mL", "毫升", true, false, false},
    {"L", "升", true, false, false},
    {"l", "升", true, false, false},
    {"°C", "摄氏度", false, false, false},
    {"℃", "摄氏度", false, false, false},
    {"°F", "华氏度", false, false, false},
    {"℉", "华氏度", false, false, false},
    {"°", "度", false, false, false},
    {"h", "小时", true, false, false},
    {"min", "分钟", true, false, false},
    {"s", "秒", true, false, false},
    {"ms", "毫秒", false, false, false},
    {"KB", "千字节", false, false, false},
    {"MB", "兆字节", false, false, false},
    {"GB", "吉字节", false, false, false},
    {"TB", "太字节", false, false, false},
    {"Hz", "赫兹", false, false, false},
    {"kHz", "千赫兹", false, false, false},
    {"MHz", "兆赫", false, false, false},
    {"GHz", "吉赫", false, false, false},
    {"kW", "千瓦", false, false, false},
    {"W", "瓦", false, false, false},
    {"V", "伏", false, false, false},
    {"A", "安", false, false, true},
    {"mAh", "毫安时", false, false, false},
    {"USD", "美元", true, true, false},
    {"RMB", "人民币", true, true, false},
    {"CNY", "人民币", true, true, false},
    {"EUR", "欧元", true, true, false},
    {"GBP", "英镑", true, true, false},
    {"JPY", "日元", true, true, false},
    {"HKD", "港元", true, true, false},
    {"kWh", "千瓦时", false, false, false},
    {"mA", "毫安", false, false, false},
    {"kV", "千伏", false, false, false},
    {"mV", "毫伏", false, false, false},
    {"kB", "千字节", false, false, false},
    {"ns", "纳秒", false, false, false},
    {"μs", "微秒", false, false, false},
    {"dB", "分贝", false, false, false},
}};

// Currency symbols before a number and the word said after it.
struct CurrencySymbol {
  std::string_view symbol;
  std::string_view word;
};
constexpr std::array<CurrencySymbol, 5> kCurrencySymbols{{
    {"¥", "元"},
    {"￥", "元"},
    {"$", "美元"},
    {"€", "欧元"},
    {"£", "英镑"},
}};

// Multipliers that may sit between an amount and its currency ("$3亿" → 三亿美元).
constexpr std::array<std::string_view, 5> kMoneyMultipliers{"万亿", "千万", "百万", "万", "亿"};

// Words after which a number is a code read digit by digit (房间302 → 房间三〇二).
constexpr std::array<std::string_view, 5> kDigitStringMarkers{"房间", "房", "号楼", "车次", "航班"};
// Words after which a short digit string is a number to call (拨打110 → 拨打幺幺零).
constexpr std::array<std::string_view, 5> kCallWords{"拨打", "拨", "电话", "号码", "热线"};
constexpr std::array<std::string_view, 8> kServiceNumbers{"110", "119",   "120",   "122",
                                                          "114", "12345", "10086", "10010"};
// What may sit between a call word and its number ("电话：110").
constexpr std::array<std::string_view, 4> kCallWordGaps{"是", "：", ":", " "};
// Words after N年 that make it a span of years rather than a year (10年来, 20年后).
constexpr std::array<std::string_view, 12> kDurationMarkers{"来", "后", "前", "内", "间",     "里",
                                                            "多", "半", "以", "左", "的时间", "了"};
// Range separators between two numbers (3-5天, 10~20人).
constexpr std::array<std::string_view, 6> kRangeSeparators{"-", "~", "～", "—", "–", "〜"};
// Symbols after which "-" is a hyphen or range mark, not a minus sign.
constexpr std::array<std::string_view, 8> kNumberEndSymbols{"°",  "℃", "℉", "‰",
                                                            "％", "²", "³", "㎡"};

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_letter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
int digit_value(char c) {
  return c - '0';
}

char byte_at(std::string_view text, size_t pos) {
  return pos < text.size() ? text[pos] : '\0';
}

bool has_at(std::string_view text, size_t pos, std::string_view word) {
  return pos <= text.size() && text.substr(pos).starts_with(word);
}

bool ends_at(std::string_view text, size_t pos, std::string_view word) {
  return pos <= text.size() && text.substr(0, pos).ends_with(word);
}

template <size_t N>
bool any_at(std::string_view text, size_t pos, const std::array<std::string_view, N>& words) {
  for (std::string_view word : words) {
    if (has_at(text, pos, word)) return true;
  }
  return false;
}

template <size_t N>
bool any_ends_at(std::string_view text, size_t pos, const std::array<std::string_view, N>& words) {
  for (std::string_view word : words) {
    if (ends_at(text, pos, word)) return true;
  }
  return false;
}

size_t digit_run(std::string_view text, size_t pos) {
  size_t end = pos;
  while (end < text.size() && is_digit(text[end])) ++end;
  return end - pos;
}

int small_value(std::string_view digits) {
  int value = 0;
  for (char c : digits) value = value * 10 + digit_value(c);
  return value;
}

std::string_view strip_leading_zeros(std::string_view digits) {
  while (digits.size() > 1 && digits.front() == '0') digits.remove_prefix(1);
  return digits;
}

std::string ascii_digits(std::string_view text) {
  std::string digits;
  for (char c : text) {
    if (is_digit(c)) digits += c;
  }
  return digits;
}

// The code point starting at `pos`, or U+FFFD where the bytes are not UTF-8.
char32_t code_point_at(std::string_view text, size_t pos) {
  if (pos >= text.size()) return 0;
  const std::vector<Character> one = characters(text.substr(pos, 4));
  return one.front().code;
}

// The unit word of the group that ends at `power` (10^power): 万, 亿, or 万亿 when the 亿 group
// below it is empty.
std::string_view group_unit(std::string_view digits, size_t power) {
  if (power == 4) return "万";
  if (power == 8) return "亿";
  const std::string_view yi_group = digits.substr(digits.size() - 12, 4);
  return yi_group.find_first_not_of('0') == std::string_view::npos ? "万亿" : "万";
}

// Hanzi for 1 to 16 digits without a leading zero, or "0".
std::string cardinal_value(std::string_view digits) {
  if (digits == "0") return std::string(kCardinalDigits[0]);
  std::string out;
  bool zero_pending = false;
  bool group_has_digit = false;
  for (size_t i = 0; i < digits.size(); ++i) {
    const size_t power = digits.size() - 1 - i;
    const size_t place = power % 4;
    const int digit = digit_value(digits[i]);
    if (digit == 0) {
      zero_pending = true;
    } else {
      if (zero_pending) out += kCardinalDigits[0];
      zero_pending = false;
      group_has_digit = true;
      const bool leading_ten = digit == 1 && place == 1 && i == 0;
      const bool liang = digit == 2 && (place == 3 || (place == 0 && power >= 4 && i == 0));
      if (liang) {
        out += "两";
      } else if (!leading_ten) {
        out += kCardinalDigits[static_cast<size_t>(digit)];
      }
      out += kSmallUnits[place];
    }
    if (place == 0 && power > 0 && group_has_digit) {
      out += group_unit(digits, power);
      zero_pending = false;
    }
    if (place == 0) group_has_digit = false;
  }
  return out;
}

// How a number expression reads; the kinds decide which neighbours a range mark may join.
enum class Kind { kPlain, kDate, kTime, kPercent, kMoney, kQuantity, kPhone };

struct Reading {
  std::string hanzi;
  size_t end = 0;
  Kind kind = Kind::kPlain;
};

struct ParsedNumber {
  std::string integer;   // digits, thousands separators removed
  std::string fraction;  // digits after the point; empty when there is none
  bool grouped = false;  // written with thousands separators
  size_t end = 0;
};

// The number whose digits start at `pos`: digits, optional ",ddd" groups, optional ".ddd".
ParsedNumber parse_number(std::string_view text, size_t pos) {
  ParsedNumber number;
  size_t end = pos + digit_run(text, pos);
  number.integer = text.substr(pos, end - pos);
  if (number.integer.size() <= 3 && number.integer.front() != '0') {
    while (byte_at(text, end) == ',' && digit_run(text, end + 1) == 3) {
      number.integer += text.substr(end + 1, 3);
      number.grouped = true;
      end += 4;
    }
  }
  if (byte_at(text, end) == '.' && is_digit(byte_at(text, end + 1))) {
    const size_t length = digit_run(text, end + 1);
    number.fraction = text.substr(end + 1, length);
    end += 1 + length;
  }
  number.end = end;
  return number;
}

bool is_integer(const ParsedNumber& number) {
  return number.fraction.empty();
}

bool is_lone_two(const ParsedNumber& number) {
  return number.integer == "2" && is_integer(number) && !number.grouped;
}

bool has_leading_zero(std::string_view digits) {
  return digits.size() > 1 && digits[0] == '0';
}

std::string value_reading(const ParsedNumber& number) {
  if (is_integer(number)) return cardinal(number.integer);
  return decimal(number.integer + "." + number.fraction);
}

struct Suffix {
  std::string_view hanzi;
  size_t end = 0;
  bool liang = false;
  bool currency = false;
};

bool unit_boundary(std::string_view text, size_t end, const UnitWord& unit) {
  const char next = byte_at(text, end);
  if (is_letter(next)) return false;
  if (is_digit(unit.spelling.back()) && is_digit(next)) return false;
  if (!unit.strict) return true;
  return !is_digit(next) && !is_hanzi(code_point_at(text, end));
}

// The unit or currency code right after a number at `pos`, optionally after one space.
std::optional<Suffix> unit_at(std::string_view text, size_t pos) {
  const bool spaced = byte_at(text, pos) == ' ';
  const size_t start = spaced ? pos + 1 : pos;
  const UnitWord* best = nullptr;
  for (const UnitWord& unit : kUnitWords) {
    if (!has_at(text, start, unit.spelling) || (spaced && unit.strict)) continue;
    if (!unit_boundary(text, start + unit.spelling.size(), unit)) continue;
    if (best == nullptr || unit.spelling.size() > best->spelling.size()) best = &unit;
  }
  if (best == nullptr) return std::nullopt;
  return Suffix{best->hanzi, start + best->spelling.size(), best->liang, best->currency};
}

bool measure_word_at(std::string_view text, size_t pos) {
  if (has_at(text, pos, "年级")) return false;
  return any_at(text, pos, kMeasureWords);
}

size_t range_separator_at(std::string_view text, size_t pos) {
  for (std::string_view separator : kRangeSeparators) {
    if (has_at(text, pos, separator)) return separator.size();
  }
  return 0;
}

size_t colon_at(std::string_view text, size_t pos) {
  if (byte_at(text, pos) == ':') return 1;
  return has_at(text, pos, "：") ? std::string_view("：").size() : 0;
}

struct PercentSign {
  size_t length = 0;  // 0 when there is no sign
  bool per_mille = false;
};

PercentSign percent_sign_at(std::string_view text, size_t pos) {
  if (has_at(text, pos, "‰")) return {std::string_view("‰").size(), true};
  if (byte_at(text, pos) == '%') return {1, false};
  if (has_at(text, pos, "％")) return {std::string_view("％").size(), false};
  return {};
}

// True where "-" at `pos` is a minus sign: at the start or after a space, CJK or punctuation.
bool minus_is_sign(std::string_view text, size_t pos) {
  if (pos == 0) return true;
  const char before = text[pos - 1];
  if (static_cast<unsigned char>(before) < 0x80) {
    return std::string_view(" \t\r\n([{,;:=<>!?\"'~").find(before) != std::string_view::npos;
  }
  return !any_ends_at(text, pos, kNumberEndSymbols);
}

bool call_word_before(std::string_view text, size_t pos, bool plain_da) {
  for (std::string_view gap : kCallWordGaps) {
    if (ends_at(text, pos, gap)) {
      pos -= gap.size();
      break;
    }
  }
  return any_ends_at(text, pos, kCallWords) || (plain_da && ends_at(text, pos, "打"));
}

struct DigitGroups {
  std::string digits;
  std::array<size_t, 8> lengths{};
  size_t count = 0;
  size_t end = 0;
};

// Digit groups from `pos` separated by single `separator` bytes (400-800-1234).
DigitGroups digit_groups(std::string_view text, size_t pos, char separator) {
  DigitGroups groups;
  size_t end = pos;
  while (groups.count < groups.lengths.size()) {
    const size_t length = digit_run(text, end);
    groups.digits += text.substr(end, length);
    groups.lengths[groups.count++] = length;
    end += length;
    if (byte_at(text, end) != separator || !is_digit(byte_at(text, end + 1))) break;
    ++end;
  }
  groups.end = end;
  return groups;
}

bool lengths_between(const DigitGroups& groups, size_t low, size_t high) {
  for (size_t i = 0; i < groups.count; ++i) {
    if (groups.lengths[i] < low || groups.lengths[i] > high) return false;
  }
  return true;
}

bool is_spaced_mobile(const DigitGroups& groups) {
  return groups.count == 3 && groups.lengths[0] == 3 && groups.lengths[1] == 4 &&
         groups.lengths[2] == 4 && groups.digits[0] == '1' && groups.digits[1] >= '3';
}

Reading phone_reading(const DigitGroups& groups) {
  return {digit_by_digit(groups.digits, true), groups.end, Kind::kPhone};
}

// True where a point or colon and more digits follow `end` (the number is longer than its run).
bool digits_continue(std::string_view text, size_t end) {
  const char next = byte_at(text, end);
  return (next == '.' || next == ':') && is_digit(byte_at(text, end + 1));
}

// True where the number ending at `end` goes on as a decimal, a time or a percentage.
bool number_continues(std::string_view text, size_t end) {
  return digits_continue(text, end) || percent_sign_at(text, end).length > 0;
}

// A phone number starting at the digit at `pos`: area code and number (010-12345678),
// hyphenated groups (400-800-1234), a spaced mobile (138 1234 5678), or a service number
// after a call word (拨打110).
std::optional<Reading> phone_at(std::string_view text, size_t pos) {
  const DigitGroups hyphenated = digit_groups(text, pos, '-');
  const size_t total = hyphenated.digits.size();
  const bool area_code = hyphenated.count == 2 && hyphenated.lengths[0] >= 3 &&
                         hyphenated.lengths[0] <= 4 && hyphenated.lengths[1] >= 7 &&
                         hyphenated.lengths[1] <= 8;
  const bool groups = hyphenated.count >= 3 && lengths_between(hyphenated, 3, 4) && total >= 10;
  if ((area_code || groups) && !number_continues(text, hyphenated.end)) {
    return phone_reading(hyphenated);
  }
  const DigitGroups spaced = digit_groups(text, pos, ' ');
  if (is_spaced_mobile(spaced) && !number_continues(text, spaced.end)) return phone_reading(spaced);

  const size_t length = digit_run(text, pos);
  const size_t end = pos + length;
  if (number_continues(text, end) || measure_word_at(text, end) || unit_at(text, end)) {
    return std::nullopt;
  }
  const std::string_view digits = text.substr(pos, length);
  bool service = false;
  for (std::string_view number : kServiceNumbers) service = service || digits == number;
  const bool called = (service && call_word_before(text, pos, true)) ||
                      (length >= 3 && length <= 6 && call_word_before(text, pos, false));
  if (!called) return std::nullopt;
  return Reading{digit_by_digit(digits, true), end, Kind::kPhone};
}

// "+86 138 1234 5678" → 加八六幺三八幺二三四五六七八.
std::optional<Reading> plus_phone_at(std::string_view text, size_t pos) {
  const size_t code_length = digit_run(text, pos + 1);
  if (code_length < 1 || code_length > 3) return std::nullopt;
  size_t start = pos + 1 + code_length;
  const char separator = byte_at(text, start);
  if (separator == ' ' || separator == '-') ++start;
  if (!is_digit(byte_at(text, start))) return std::nullopt;
  const std::string prefix = "加" + digit_by_digit(text.substr(pos + 1, code_length), true);
  const DigitGroups hyphenated = digit_groups(text, start, '-');
  const DigitGroups spaced = digit_groups(text, start, ' ');
  std::optional<Reading> phone;
  if (hyphenated.count >= 2 && hyphenated.digits.size() >= 5) {
    phone = phone_reading(hyphenated);
  } else if (is_spaced_mobile(spaced)) {
    phone = phone_reading(spaced);
  } else if (digit_run(text, start) >= 5) {
    const size_t length = digit_run(text, start);
    phone = Reading{digit_by_digit(text.substr(start, length), true), start + length, Kind::kPhone};
  }
  if (!phone || number_continues(text, phone->end)) return std::nullopt;
  phone->hanzi = prefix + phone->hanzi;
  return phone;
}

// YYYY-MM-DD, YYYY/MM/DD or YYYY.MM.DD with a valid month and day.
std::optional<Reading> date_at(std::string_view text, size_t pos) {
  if (digit_run(text, pos) != 4) return std::nullopt;
  const char separator = byte_at(text, pos + 4);
  if (separator != '-' && separator != '/' && separator != '.') return std::nullopt;
  const size_t month_pos = pos + 5;
  const size_t month_length = digit_run(text, month_pos);
  if (month_length < 1 || month_length > 2) return std::nullopt;
  if (byte_at(text, month_pos + month_length) != separator) return std::nullopt;
  const size_t day_pos = month_pos + month_length + 1;
  const size_t day_length = digit_run(text, day_pos);
  if (day_length < 1 || day_length > 2) return std::nullopt;
  const size_t end = day_pos + day_length;
  if (byte_at(text, end) == separator && is_digit(byte_at(text, end + 1))) return std::nullopt;
  const std::string_view month = text.substr(month_pos, month_length);
  const std::string_view day = text.substr(day_pos, day_length);
  const int month_value = small_value(month);
  const int day_value = small_value(day);
  if (month_value < 1 || month_value > 12 || day_value < 1 || day_value > 31) return std::nullopt;
  std::string hanzi = digit_by_digit(text.substr(pos, 4), false) + "年";
  hanzi += cardinal(strip_leading_zeros(month)) + "月";
  hanzi += cardinal(strip_leading_zeros(day)) + "日";
  return Reading{hanzi, end, Kind::kDate};
}

// Minutes or seconds of a time: "05" → 零五, "30" → 三十.
std::string clock_field(std::string_view two_digits) {
  if (two_digits[0] == '0') {
    return std::string(kCardinalDigits[0]) +
           std::string(kCardinalDigits[static_cast<size_t>(digit_value(two_digits[1]))]);
  }
  return cardinal(two_digits);
}

// H:MM or H:MM:SS with hours 0-23 and minutes and seconds 00-59.
std::optional<Reading> time_at(std::string_view text, size_t pos) {
  const size_t hour_length = digit_run(text, pos);
  if (hour_length < 1 || hour_length > 2) return std::nullopt;
  const size_t first_colon = colon_at(text, pos + hour_length);
  if (first_colon == 0) return std::nullopt;
  const size_t minute_pos = pos + hour_length + first_colon;
  if (digit_run(text, minute_pos) != 2) return std::nullopt;
  size_t end = minute_pos + 2;
  std::string_view seconds;
  if (const size_t colon = colon_at(text, end); colon > 0 && is_digit(byte_at(text, end + colon))) {
    if (digit_run(text, end + colon) != 2) return std::nullopt;
    seconds = text.substr(end + colon, 2);
    end += colon + 2;
    if (const size_t extra = colon_at(text, end);
        extra > 0 && is_digit(byte_at(text, end + extra))) {
      return std::nullopt;
    }
  }
  const std::string_view hour = strip_leading_zeros(text.substr(pos, hour_length));
  const std::string_view minutes = text.substr(minute_pos, 2);
  if (small_value(hour) > 23 || small_value(minutes) > 59) return std::nullopt;
  if (!seconds.empty() && small_value(seconds) > 59) return std::nullopt;
  std::string hanzi = hour == "2" ? "两" : cardinal(hour);
  hanzi += "点";
  const bool has_seconds = !seconds.empty() && seconds != "00";
  if (minutes != "00" || has_seconds) hanzi += clock_field(minutes) + "分";
  if (has_seconds) hanzi += clock_field(seconds) + "秒";
  return Reading{hanzi, end, Kind::kTime};
}

// Whether a two-digit number before 年 is a year said digit by digit (98年 → 九八年) rather than a
// count of years (10年 → 十年). `next` is the byte after 年.
bool two_digit_year_is_spelled(std::string_view text, std::string_view digits, size_t next) {
  if (digits[0] == '0') return true;
  if (has_at(text, next, "月") || is_digit(byte_at(text, next))) return true;
  if (has_at(text, next, "代") || any_at(text, next, kDurationMarkers)) return false;
  const int value = small_value(digits);
  return value >= 50 && value % 10 != 0;
}

// Hanzi for a plain non-negative integer, given what is written around it: ordinals, years,
// codes, phone numbers, months and days with leading zeros, and 两 before measure words.
std::string integer_reading(std::string_view text, size_t start, std::string_view digits,
                            size_t end, bool liang_after, bool quantity_after) {
  if (ends_at(text, start, "第")) return cardinal(strip_leading_zeros(digits));
  if (any_ends_at(text, start, kDigitStringMarkers)) return digit_by_digit(digits, false);
  if (has_at(text, end, "年") && !has_at(text, end, "年级")) {
    const size_t next = end + std::string_view("年").size();
    if (digits.size() == 4) return digit_by_digit(digits, false);
    if (digits.size() == 2 && two_digit_year_is_spelled(text, digits, next)) {
      return digit_by_digit(digits, false);
    }
  }
  if (digits.size() >= 7) {
    // Long runs are phone numbers or identifiers, unless they count something or are round.
    const bool mobile = digits.size() == 11 && digits[0] == '1' && digits[1] >= '3';
    const size_t trailing_zeros = digits.size() - 1 - digits.find_last_not_of('0');
    const bool amount = !has_leading_zero(digits) && !mobile &&
                        digits.size() <= kMaxCardinalDigits &&
                        (quantity_after || trailing_zeros >= 4);
    return amount ? cardinal(digits) : digit_by_digit(digits, true);
  }
  if (has_leading_zero(digits)) {
    const std::string_view value = strip_leading_zeros(digits);
    if (has_at(text, end, "月") || has_at(text, end, "日") || has_at(text, end, "号") ||
        has_at(text, end, "点") || has_at(text, end, "时")) {
      return cardinal(value);
    }
    if ((has_at(text, end, "分") || has_at(text, end, "秒")) && value.size() == 1) {
      return value == "0" ? cardinal(value) : std::string(kCardinalDigits[0]) + cardinal(value);
    }
    return digit_by_digit(digits, false);
  }
  if (digits == "2" && liang_after) return "两";
  return cardinal(digits);
}

// A number with no range, fraction or percent after it: the number, then its unit or currency
// code if one follows.
Reading single_number(std::string_view text, size_t start, const ParsedNumber& number,
                      bool negative) {
  const std::optional<Suffix> suffix = unit_at(text, number.end);
  const bool measure = measure_word_at(text, number.end);
  Reading reading;
  reading.end = number.end;
  if (negative) {
    reading.hanzi = "负" + value_reading(number);
  } else if (is_integer(number) && !number.grouped) {
    const bool liang_after = measure || (suffix && suffix->liang);
    reading.hanzi = integer_reading(text, start, number.integer, number.end, liang_after,
                                    measure || suffix.has_value());
  } else {
    reading.hanzi = value_reading(number);
  }
  if (suffix) {
    reading.hanzi += suffix->hanzi;
    reading.end = suffix->end;
    reading.kind = suffix->currency ? Kind::kMoney : Kind::kQuantity;
  }
  return reading;
}

// 1.2.3 or 192.168.1.1: each group read as a number, joined by 点.
Reading dotted_number(std::string_view text, const ParsedNumber& number, bool negative) {
  std::string hanzi = negative ? "负" : "";
  hanzi += cardinal(number.integer) + "点" + cardinal(number.fraction);
  size_t end = number.end;
  while (byte_at(text, end) == '.' && is_digit(byte_at(text, end + 1))) {
    const size_t length = digit_run(text, end + 1);
    hanzi += "点" + cardinal(text.substr(end + 1, length));
    end += 1 + length;
  }
  return {hanzi, end, Kind::kPlain};
}

// a/b with up to three digits a side → b分之a.
std::optional<Reading> fraction_at(std::string_view text, size_t start, const ParsedNumber& number,
                                   bool negative) {
  if (!is_integer(number) || number.grouped || number.integer.size() > 3) return std::nullopt;
  if (byte_at(text, number.end) != '/') return std::nullopt;
  if (start >= 2 && text[start - 1] == '/' && is_digit(text[start - 2])) return std::nullopt;
  const size_t denominator_pos = number.end + 1;
  const size_t length = digit_run(text, denominator_pos);
  if (length < 1 || length > 3) return std::nullopt;
  const size_t end = denominator_pos + length;
  if (byte_at(text, end) == '/' || number_continues(text, end)) return std::nullopt;
  const std::string_view denominator = text.substr(denominator_pos, length);
  if (has_leading_zero(number.integer) || has_leading_zero(denominator) || denominator == "0") {
    return std::nullopt;
  }
  std::string hanzi = negative ? "负" : "";
  hanzi += cardinal(denominator) + "分之" + cardinal(number.integer);
  return Reading{hanzi, end, Kind::kPlain};
}

// Hanzi for a percentage or per-mille value (-2 → 负二; 100% reads 百分之百).
std::string percent_reading(const ParsedNumber& number, bool negative, bool per_mille) {
  std::string value = value_reading(number);
  if (!per_mille && !negative && value == "一百") value = "百";
  return std::string(per_mille ? "千分之" : "百分之") + (negative ? "负" : "") + value;
}

// N-M, N~M, N～M or N—M between two plain numbers → N到M (3-5天 → 三到五天).
std::optional<Reading> range_at(std::string_view text, size_t start, const ParsedNumber& first,
                                bool negative) {
  const size_t separator = range_separator_at(text, first.end);
  if (separator == 0 || has_leading_zero(first.integer)) return std::nullopt;
  for (std::string_view mark : kRangeSeparators) {
    if (start > mark.size() && ends_at(text, start, mark) &&
        is_digit(text[start - mark.size() - 1])) {
      return std::nullopt;  // the middle of a chain such as 1-2-3
    }
  }
  size_t second_pos = first.end + separator;
  const bool minus_separator = text.substr(first.end, separator) == "-";
  const bool second_negative = !minus_separator && byte_at(text, second_pos) == '-';
  if (second_negative) ++second_pos;
  if (!is_digit(byte_at(text, second_pos))) return std::nullopt;
  const ParsedNumber second = parse_number(text, second_pos);
  if (has_leading_zero(second.integer) || digits_continue(text, second.end)) return std::nullopt;
  const char next = byte_at(text, second.end);
  if (next == '/' || next == '=' ||
      (range_separator_at(text, second.end) > 0 && is_digit(byte_at(text, second.end + 1)))) {
    return std::nullopt;
  }
  const std::string first_sign = negative ? "负" : "";
  const std::string second_sign = second_negative ? "负" : "";

  if (const PercentSign percent = percent_sign_at(text, second.end); percent.length > 0) {
    std::string hanzi = percent_reading(first, negative, percent.per_mille) + "到" +
                        percent_reading(second, second_negative, percent.per_mille);
    return Reading{hanzi, second.end + percent.length, Kind::kPercent};
  }
  const bool years = has_at(text, second.end, "年") && is_integer(first) && is_integer(second) &&
                     !first.grouped && !second.grouped && first.integer.size() == 4 &&
                     second.integer.size() == 4 && !negative && !second_negative;
  if (years) {
    std::string hanzi =
        digit_by_digit(first.integer, false) + "到" + digit_by_digit(second.integer, false);
    return Reading{hanzi, second.end, Kind::kPlain};
  }
  const std::optional<Suffix> suffix = unit_at(text, second.end);
  if (!suffix && is_letter(next)) return std::nullopt;
  const bool liang_after = suffix ? suffix->liang : measure_word_at(text, second.end);
  const bool ordinal = ends_at(text, start, "第");
  std::string hanzi = first_sign;
  hanzi += is_lone_two(first) && liang_after && !negative && !ordinal ? "两" : value_reading(first);
  hanzi += "到" + second_sign;
  hanzi += is_lone_two(second) && liang_after && !second_negative ? "两" : value_reading(second);
  Reading reading{hanzi, second.end, Kind::kPlain};
  if (suffix) {
    reading.hanzi += suffix->hanzi;
    reading.end = suffix->end;
    reading.kind = suffix->currency ? Kind::kMoney : Kind::kQuantity;
  }
  return reading;
}

// A number whose sign (if any) is at `start` and whose first digit is at `pos`.
Reading number_at(std::string_view text, size_t start, size_t pos, bool negative) {
  if (!negative) {
    if (auto date = date_at(text, pos)) return *date;
    if (auto time = time_at(text, pos)) return *time;
    if (auto phone = phone_at(text, pos)) return *phone;
  }
  const ParsedNumber number = parse_number(text, pos);
  if (!is_integer(number) && !number.grouped && byte_at(text, number.end) == '.' &&
      is_digit(byte_at(text, number.end + 1))) {
    return dotted_number(text, number, negative);
  }
  if (const PercentSign percent = percent_sign_at(text, number.end); percent.length > 0) {
    return {percent_reading(number, negative, percent.per_mille), number.end + percent.length,
            Kind::kPercent};
  }
  if (auto fraction = fraction_at(text, start, number, negative)) return *fraction;
  if (auto range = range_at(text, start, number, negative)) return *range;
  return single_number(text, start, number, negative);
}

std::string amount_reading(const ParsedNumber& number) {
  return is_lone_two(number) ? "两" : value_reading(number);
}

// ¥12.50 → 十二点五元, $3亿 → 三亿美元, ¥10-20 → 十到二十元.
std::optional<Reading> money_at(std::string_view text, size_t pos) {
  for (const CurrencySymbol& currency : kCurrencySymbols) {
    if (!has_at(text, pos, currency.symbol)) continue;
    size_t number_pos = pos + currency.symbol.size();
    if (byte_at(text, number_pos) == ' ') ++number_pos;
    if (!is_digit(byte_at(text, number_pos))) return std::nullopt;
    const ParsedNumber number = parse_number(text, number_pos);
    size_t end = number.end;
    std::string hanzi = amount_reading(number);
    if (const size_t separator = range_separator_at(text, end);
        separator > 0 && is_digit(byte_at(text, end + separator))) {
      const ParsedNumber second = parse_number(text, end + separator);
      hanzi += "到" + amount_reading(second);
      end = second.end;
    }
    for (std::string_view multiplier : kMoneyMultipliers) {
      if (has_at(text, end, multiplier)) {
        hanzi += multiplier;
        end += multiplier.size();
        break;
      }
    }
    if (!has_at(text, end, currency.word)) hanzi += currency.word;
    return Reading{hanzi, end, Kind::kMoney};
  }
  return std::nullopt;
}

// The number expression starting at `pos`, if one does.
std::optional<Reading> expression_at(std::string_view text, size_t pos) {
  const char c = byte_at(text, pos);
  if (is_digit(c)) return number_at(text, pos, pos, false);
  if (c == '-' && is_digit(byte_at(text, pos + 1)) && minus_is_sign(text, pos)) {
    return number_at(text, pos, pos + 1, true);
  }
  if (c == '+' && is_digit(byte_at(text, pos + 1))) return plus_phone_at(text, pos);
  if (c == '-' && minus_is_sign(text, pos)) {
    std::optional<Reading> money = money_at(text, pos + 1);
    if (money) money->hanzi = "负" + money->hanzi;
    return money;
  }
  return money_at(text, pos);
}

bool joins_ranges(Kind kind) {
  return kind != Kind::kPlain && kind != Kind::kPhone;
}

// Letters and digits from `pos` (G1234, CA1234, PM2.5): letters kept, digits read one by one.
size_t latin_word(std::string_view text, size_t pos, std::string& out) {
  while (pos < text.size() && (is_letter(text[pos]) || is_digit(text[pos]))) {
    if (is_letter(text[pos])) {
      out += text[pos++];
      continue;
    }
    const ParsedNumber number = parse_number(text, pos);
    if (is_integer(number) || number.grouped) {
      const size_t length = digit_run(text, pos);
      out += digit_by_digit(text.substr(pos, length), false);
      pos += length;
    } else {
      out += decimal(number.integer + "." + number.fraction);
      pos = number.end;
    }
  }
  return pos;
}

}  // namespace

std::string cardinal(std::string_view digits) {
  const std::string value = ascii_digits(digits);
  if (value.empty()) return "";
  if (value.size() > kMaxCardinalDigits || has_leading_zero(value)) {
    return digit_by_digit(value, false);
  }
  return cardinal_value(value);
}

std::string digit_by_digit(std::string_view digits, bool phone) {
  const auto& words = phone ? kPhoneDigits : kSpelledDigits;
  std::string out;
  for (char c : digits) {
    if (is_digit(c)) {
      out += words[static_cast<size_t>(digit_value(c))];
    } else {
      out += c;
    }
  }
  return out;
}

std::string decimal(std::string_view digits) {
  const size_t point = digits.find('.');
  if (point == std::string_view::npos) return cardinal(digits);
  const std::string integer = ascii_digits(digits.substr(0, point));
  std::string fraction = ascii_digits(digits.substr(point + 1));
  while (!fraction.empty() && fraction.back() == '0') fraction.pop_back();
  std::string out = cardinal(strip_leading_zeros(integer.empty() ? "0" : integer));
  if (fraction.empty()) return out;
  out += "点";
  for (char c : fraction) out += kCardinalDigits[static_cast<size_t>(digit_value(c))];
  return out;
}

std::string read_numbers(std::string_view text) {
  std::string out;
  out.reserve(text.size() * 2);
  size_t pos = 0;
  size_t last_end = std::string_view::npos;
  Kind last_kind = Kind::kPlain;
  while (pos < text.size()) {
    if (pos == last_end && joins_ranges(last_kind)) {
      if (const size_t separator = range_separator_at(text, pos); separator > 0) {
        const std::optional<Reading> next = expression_at(text, pos + separator);
        if (next && next->kind == last_kind) {
          out += "到" + next->hanzi;
          pos = last_end = next->end;
          continue;
        }
      }
    }
    if (is_letter(text[pos])) {
      pos = latin_word(text, pos, out);
      continue;
    }
    if (std::optional<Reading> reading = expression_at(text, pos)) {
      out += reading->hanzi;
      pos = last_end = reading->end;
      last_kind = reading->kind;
      continue;
    }
    out += text[pos++];
  }
  return out;
}

}  // namespace voxd::text::mandarin
