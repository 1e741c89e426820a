#include "text/normalize.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/utf8.h>

#include <cstdint>
#include <limits>
#include <optional>

#include "core/error.h"
#include "text/ascii.h"
#include "text/numbers.h"
#include "text/patterns.h"

namespace voxd::text {
namespace {

using ascii::is_alpha;
using ascii::is_upper;
using ascii::lower;

// ---- Unicode clean-up -------------------------------------------------------------------------

bool is_line_break(UChar32 c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x85 || c == 0x2028 ||
         c == 0x2029;
}

// The ASCII replacement of a typographic character, or nullopt to keep it as it is.
std::optional<std::string_view> ascii_replacement(UChar32 c) {
  switch (c) {
    case 0x2018:  // ‘
    case 0x2019:  // ’
    case 0x201A:  // ‚
    case 0x201B:  // ‛
    case 0x2032:  // ′
      return "'";
    case 0x201C:  // “
    case 0x201D:  // ”
    case 0x201E:  // „
    case 0x201F:  // ‟
    case 0x00AB:  // «
    case 0x00BB:  // »
    case 0x2033:  // ″
      return "\"";
    case 0x2010:  // hyphen
    case 0x2011:  // non-breaking hyphen
    case 0x2212:  // minus sign
      return "-";
    case 0x2012:  // figure dash
    case 0x2013:  // en dash
    case 0x2014:  // em dash
    case 0x2015:  // horizontal bar
    case 0x2E3A:  // two-em dash
      return " - ";
    case 0x2044:  // fraction slash
      return "/";
    case 0x2022:  // bullet
    case 0x00B7:  // middle dot
      return " ";
    default:
      return std::nullopt;
  }
}

enum class Drop { Keep, Silently, AsSpace };

Drop drop_kind(UChar32 c) {
  if (c == 0x00B0) return Drop::Keep;  // degree sign, read with units
  if (u_hasBinaryProperty(c, UCHAR_VARIATION_SELECTOR)) return Drop::Silently;
  switch (u_charType(c)) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_SURROGATE:
    case U_UNASSIGNED:
    case U_ENCLOSING_MARK:
      return Drop::Silently;
    case U_PRIVATE_USE_CHAR:
    case U_OTHER_SYMBOL:
    case U_MODIFIER_SYMBOL:
      return Drop::AsSpace;
    default:
      return Drop::Keep;
  }
}

// The non-empty parts joined with single spaces.
std::string join(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (std::string_view part : parts) {
    if (part.empty()) continue;
    if (!out.empty()) out += ' ';
    out += part;
  }
  return out;
}

// ---- English expansion ------------------------------------------------------------------------

bool is_word_byte(char c) {
  return is_alpha(c) || ascii::is_digit(c) || static_cast<unsigned char>(c) >= 0x80;
}

struct Abbreviation {
  std::string_view written;  // without the final period
  std::string_view spoken;
  bool title;  // always followed by a name, so never ends a sentence
};

constexpr Abbreviation kAbbreviations[] = {
    {"Mr", "mister", true},
    {"Mrs", "missus", true},
    {"Ms", "miz", true},
    {"Dr", "doctor", true},
    {"Prof", "professor", true},
    {"Mt", "mount", true},
    {"Gen", "general", true},
    {"Gov", "governor", true},
    {"Sen", "senator", true},
    {"Rep", "representative", true},
    {"Capt", "captain", true},
    {"Lt", "lieutenant", true},
    {"Col", "colonel", true},
    {"Sgt", "sergeant", true},
    {"Rev", "reverend", true},
    {"Hon", "honorable", true},
    {"Fig", "figure", true},
    {"fig", "figure", true},
    {"Vol", "volume", true},
    {"vol", "volume", true},
    {"Jr", "junior", false},
    {"Sr", "senior", false},
    {"vs", "versus", false},
    {"etc", "et cetera", false},
    {"Inc", "incorporated", false},
    {"Ltd", "limited", false},
    {"Co", "company", false},
    {"Corp", "corporation", false},
    {"approx", "approximately", false},
    {"Ave", "avenue", false},
    {"Blvd", "boulevard", false},
    {"Rd", "road", false},
    {"Dept", "department", false},
    {"Univ", "university", false},
    {"Jan", "January", false},
    {"Feb", "February", false},
    {"Mar", "March", false},
    {"Apr", "April", false},
    {"Jun", "June", false},
    {"Jul", "July", false},
    {"Aug", "August", false},
    {"Sep", "September", false},
    {"Sept", "September", false},
    {"Oct", "October", false},
    {"Nov", "November", false},
    {"Dec", "December", false},
};

struct Unit {
  std::string_view written;
  std::string_view singular;
  std::string_view plural;
};

// Longer forms before their prefixes ("m/s" before "m": a unit must not be followed by a letter,
// but "/" is not one).
constexpr Unit kUnits[] = {
    {"km/h", "kilometer per hour", "kilometers per hour"},
    {"m/s", "meter per second", "meters per second"},
    {"MB/s", "megabyte per second", "megabytes per second"},
    {"GB/s", "gigabyte per second", "gigabytes per second"},
    {"km2", "square kilometer", "square kilometers"},
    {"m2", "square meter", "square meters"},
    {"cm2", "square centimeter", "square centimeters"},
    {"m3", "cubic meter", "cubic meters"},
    {"km", "kilometer", "kilometers"},
    {"m", "meter", "meters"},
    {"mi", "mile", "miles"},
    {"yd", "yard", "yards"},
    {"g", "gram", "grams"},
    {"mL", "milliliter", "milliliters"},
    {"L", "liter", "liters"},
    {"ms", "millisecond", "milliseconds"},
    {"\u03BCs", "microsecond", "microseconds"},
    {"ns", "nanosecond", "nanoseconds"},
    {"sec", "second", "seconds"},
    {"min", "minute", "minutes"},
    {"hrs", "hour", "hours"},
    {"hr", "hour", "hours"},
    {"h", "hour", "hours"},
    {"\u03BCm", "micrometer", "micrometers"},
    {"nm", "nanometer", "nanometers"},
    {"\u03BCg", "microgram", "micrograms"},
    {"kWh", "kilowatt hour", "kilowatt hours"},
    {"kW", "kilowatt", "kilowatts"},
    {"MW", "megawatt", "megawatts"},
    {"W", "watt", "watts"},
    {"mAh", "milliamp hour", "milliamp hours"},
    {"mA", "milliamp", "milliamps"},
    {"V", "volt", "volts"},
    {"kcal", "kilocalorie", "kilocalories"},
    {"psi", "psi", "psi"},
    {"dB", "decibel", "decibels"},
    {"fps", "frame per second", "frames per second"},
    {"px", "pixel", "pixels"},
    {"kbps", "kilobit per second", "kilobits per second"},
    {"Mbps", "megabit per second", "megabits per second"},
    {"Gbps", "gigabit per second", "gigabits per second"},
    {"KiB", "kibibyte", "kibibytes"},
    {"MiB", "mebibyte", "mebibytes"},
    {"GiB", "gibibyte", "gibibytes"},
    {"TiB", "tebibyte", "tebibytes"},
    {"PB", "petabyte", "petabytes"},
    {"kg", "kilogram", "kilograms"},
    {"cm", "centimeter", "centimeters"},
    {"mm", "millimeter", "millimeters"},
    {"mg", "milligram", "milligrams"},
    {"ml", "milliliter", "milliliters"},
    {"lbs", "pound", "pounds"},
    {"lb", "pound", "pounds"},
    {"oz", "ounce", "ounces"},
    {"ft", "foot", "feet"},
    {"mph", "mile per hour", "miles per hour"},
    {"kph", "kilometer per hour", "kilometers per hour"},
    {"KB", "kilobyte", "kilobytes"},
    {"MB", "megabyte", "megabytes"},
    {"GB", "gigabyte", "gigabytes"},
    {"TB", "terabyte", "terabytes"},
    {"Hz", "hertz", "hertz"},
    {"kHz", "kilohertz", "kilohertz"},
    {"MHz", "megahertz", "megahertz"},
    {"GHz", "gigahertz", "gigahertz"},
    {"\u00B0C", "degree Celsius", "degrees Celsius"},
    {"\u00B0F", "degree Fahrenheit", "degrees Fahrenheit"},
    {"\u00B0", "degree", "degrees"},
};

struct Currency {
  std::string_view symbol;
  std::string_view major_singular, major_plural, minor_singular, minor_plural;
};

constexpr Currency kCurrencies[] = {
    {"$", "dollar", "dollars", "cent", "cents"},
    {"\u20AC", "euro", "euros", "cent", "cents"},
    {"\u00A3", "pound", "pounds", "penny", "pence"},
    {"\u00A5", "yen", "yen", "", ""},
};

constexpr std::string_view kScaleWords[] = {"thousand", "million", "billion", "trillion"};

// A number as written: integer digits (thousands separators removed), optional fraction.
struct Number {
  std::string integer;
  std::string fraction;
  bool grouped = false;  // written with thousands separators
  bool decimal() const { return !fraction.empty(); }
  bool is_one() const { return !decimal() && integer == "1"; }
};

class EnglishExpander {
 public:
  explicit EnglishExpander(std::string_view s) : s_(s) {}

  std::string run() {
    while (i_ < s_.size()) step();
    return std::move(out_);
  }

 private:
  char at(size_t i) const { return i < s_.size() ? s_[i] : '\0'; }
  bool word_start() const { return i_ == 0 || !is_word_byte(s_[i_ - 1]); }

  // True if `word` (case-sensitive) is at i and is not followed by a letter.
  bool word_at(size_t i, std::string_view word) const {
    return s_.substr(i, word.size()) == word && !is_alpha(at(i + word.size()));
  }

  void emit_raw(char c) {
    if (space_after_ && is_word_byte(c)) out_ += ' ';
    space_after_ = false;
    out_ += c;
  }

  void emit_words(std::string_view words) {
    if (!out_.empty() && is_word_byte(out_.back())) out_ += ' ';
    out_ += words;
    space_after_ = true;
  }

  // True if a period at `dot` ends the text or a line, or is followed by a capitalised word.
  bool ends_sentence(size_t dot, bool capital_counts) const {
    size_t j = dot + 1;
    if (j >= s_.size() || s_[j] == '\n') return true;
    if (s_[j] != ' ') return false;
    return capital_counts && is_upper(at(j + 1));
  }

  void step() {
    const char c = s_[i_];
    if (word_start()) {
      if (const std::optional<Reading> form = read_form()) {
        emit_words(form->words);
        i_ += form->length;
        return;
      }
    }
    if (is_alpha(c) && word_start()) {
      if (!expand_abbreviation()) copy_word();
      // "March" as written, or spoken for "Mar." (which left no period unless it ended a sentence).
      if (is_month_name(std::string_view(out_).substr(out_.find_last_of(' ') + 1))) {
        read_day_after_month();
      }
      return;
    }
    if (c == '-' && is_number_range()) {
      emit_words("to");
      ++i_;
      return;
    }
    if (const Currency* currency = currency_at(i_)) {
      const size_t j = i_ + currency->symbol.size();
      if (ascii::is_digit(at(j))) {
        i_ = j;
        expand_currency(*currency);
        return;
      }
    }
    if (c == '-' && ascii::is_digit(at(i_ + 1)) &&
        (i_ == 0 || s_[i_ - 1] == ' ' || s_[i_ - 1] == '\n' || s_[i_ - 1] == '(' ||
         s_[i_ - 1] == '"')) {
      ++i_;
      emit_words("minus");
      expand_number();
      return;
    }
    if (ascii::is_digit(c)) {
      expand_number();
      return;
    }
    // ".5"; and a second point in a number, as in versions: "1.2.3" → one point two point three.
    if (c == '.' && ascii::is_digit(at(i_ + 1))) {
      ++i_;
      size_t j = i_;
      while (ascii::is_digit(at(j))) ++j;
      emit_words(join({"point", digit_words(s_.substr(i_, j - i_))}));
      i_ = j;
      return;
    }
    if (c == '.' && i_ > 0 && is_alpha(at(i_ + 1)) &&
        (is_alpha(s_[i_ - 1]) || ascii::is_digit(s_[i_ - 1]))) {
      emit_words("dot");  // "report.pdf", "Node.js"
    } else if (c == '*' && (between_numbers() || (at(i_ - 1) == ' ' && at(i_ + 1) == ' '))) {
      emit_words("times");
    } else if (c == '*' || c == '_') {
      emit_raw(' ');  // left over from Markdown, or snake_case
    } else if (c == '&') {
      emit_words("and");
    } else if (c == '%') {
      emit_words("percent");
    } else if (c == '#' && ascii::is_digit(at(i_ + 1))) {
      emit_words("number");
    } else {
      emit_raw(c);
    }
    ++i_;
  }

  // A date, phone number, web or e-mail address at i_.
  std::optional<Reading> read_form() const {
    const char c = s_[i_];
    if (is_alpha(c) || ascii::is_digit(c)) {
      if (std::optional<Reading> email = read_email(s_, i_)) return email;
      if (std::optional<Reading> url = read_url(s_, i_)) return url;
    }
    if (ascii::is_digit(c)) {
      if (std::optional<Reading> date = read_date(s_, i_)) return date;
    }
    if (ascii::is_digit(c) || c == '+' || c == '(') return read_phone_number(s_, i_);
    return std::nullopt;
  }

  // True if the hyphen at i_ joins two whole numbers and nothing more ("3-2", "2020-2024"; not
  // "1-2-3", "2024-03" with its leading zero, nor the minus of "5 -3").
  bool is_number_range() const {
    size_t left = i_;
    while (left > 0 && ascii::is_digit(s_[left - 1])) --left;
    size_t right = i_ + 1;
    while (ascii::is_digit(at(right))) ++right;
    if (left == i_ || right == i_ + 1 || s_[left] == '0' || s_[i_ + 1] == '0') return false;
    const char before = left > 0 ? s_[left - 1] : ' ';
    const char after = at(right);
    return before != '-' && before != '.' && before != ',' && !is_word_byte(before) &&
           after != '-' && after != '.' && after != ',' && !is_word_byte(after);
  }

  // True if the byte at i_ has a digit before and after it, spaces aside ("3 * 4").
  bool between_numbers() const {
    size_t before = i_;
    while (before > 0 && s_[before - 1] == ' ') --before;
    size_t after = i_ + 1;
    while (at(after) == ' ') ++after;
    return before > 0 && ascii::is_digit(s_[before - 1]) && ascii::is_digit(at(after));
  }

  // After a month name: a day of the month is an ordinal ("March 5, 2024" → "March fifth,
  // twenty twenty-four") when a year or the end of a clause follows it ("May 5 people" stays).
  void read_day_after_month() {
    if (at(i_) != ' ' || !ascii::is_digit(at(i_ + 1))) return;
    size_t end = i_ + 1;
    while (end - i_ <= 3 && ascii::is_digit(at(end))) ++end;
    const std::string day(s_.substr(i_ + 1, end - i_ - 1));
    if (day.size() > 2 || std::stoi(day) < 1 || std::stoi(day) > 31) return;
    const char after = at(end);
    const size_t year_at = end + (after == ',' ? 2 : 1);
    const bool year_follows = (after == ' ' || (after == ',' && at(end + 1) == ' ')) &&
                              ascii::is_digit(at(year_at)) && ascii::is_digit(at(year_at + 1)) &&
                              ascii::is_digit(at(year_at + 2)) &&
                              ascii::is_digit(at(year_at + 3)) && !is_word_byte(at(year_at + 4));
    const bool clause_ends = after == '\0' || after == '\n' ||
                             ((after == '.' || after == ',' || after == ';' || after == '!' ||
                               after == '?' || after == ')') &&
                              !ascii::is_digit(at(end + 1)));
    if (!year_follows && !clause_ends) return;
    emit_words(ordinal_words(day));
    i_ = end;
  }

  void copy_word() {
    while (i_ < s_.size() && (is_alpha(s_[i_]) || (s_[i_] == '\'' && is_alpha(at(i_ + 1))))) {
      emit_raw(s_[i_++]);
    }
  }

  // Expands an abbreviation or dotted acronym at i_; false if there is none.
  bool expand_abbreviation() {
    struct Dotted {
      std::string_view written;  // lower case
      std::string_view spoken;
      bool may_end_sentence;
    };
    static constexpr Dotted kDotted[] = {{"e.g.", "for example", false},
                                         {"i.e.", "that is", false},
                                         {"ph.d.", "PhD", true},
                                         {"a.m.", "AM", true},
                                         {"p.m.", "PM", true}};
    for (const Dotted& d : kDotted) {
      std::string candidate(s_.substr(i_, d.written.size()));
      for (char& ch : candidate) ch = lower(ch);
      if (candidate == d.written && !is_alpha(at(i_ + d.written.size()))) {
        i_ += d.written.size();
        emit_words(d.spoken);
        if (d.may_end_sentence && ends_sentence(i_ - 1, true)) emit_raw('.');
        return true;
      }
    }
    size_t end = i_;
    while (is_alpha(at(end))) ++end;
    if (at(end) != '.') return false;
    const std::string_view word = s_.substr(i_, end - i_);
    if (end - i_ == 1 && is_alpha(at(end + 1)) && at(end + 2) == '.') return expand_acronym();
    if (word == "No" &&
        (ascii::is_digit(at(end + 1)) || (at(end + 1) == ' ' && ascii::is_digit(at(end + 2))))) {
      emit_words("number");
      i_ = end + 1;
      return true;
    }
    if (word == "St") {
      // "Main St." is a street; "St. Patrick" (not after a capitalised word) is a saint.
      size_t prev = i_;
      while (prev > 0 && s_[prev - 1] == ' ') --prev;
      while (prev > 0 && is_alpha(s_[prev - 1])) --prev;
      const bool after_name = prev < i_ && is_upper(s_[prev]);
      const bool saint = !after_name && at(end + 1) == ' ' && is_upper(at(end + 2));
      emit_words(saint ? "Saint" : "street");
      if (!saint && ends_sentence(end, true)) emit_raw('.');
      i_ = end + 1;
      return true;
    }
    for (const Abbreviation& a : kAbbreviations) {
      if (a.written != word) continue;
      emit_words(a.spoken);
      if (!a.title && ends_sentence(end, true)) emit_raw('.');
      i_ = end + 1;
      return true;
    }
    return false;
  }

  // "U.S.A." → "USA" (eSpeak spells out short capitalised words).
  bool expand_acronym() {
    std::string letters;
    size_t j = i_;
    while (is_alpha(at(j)) && at(j + 1) == '.' && (j == i_ || !is_alpha(at(j - 1)))) {
      letters += is_upper(at(j)) ? at(j) : static_cast<char>(at(j) - 'a' + 'A');
      j += 2;
    }
    emit_words(letters);
    if (ends_sentence(j - 1, false)) emit_raw('.');
    i_ = j;
    return true;
  }

  const Currency* currency_at(size_t i) const {
    for (const Currency& c : kCurrencies) {
      if (s_.substr(i, c.symbol.size()) == c.symbol) return &c;
    }
    return nullptr;
  }

  Number parse_number() {
    Number n;
    size_t j = i_;
    while (ascii::is_digit(at(j))) n.integer += s_[j++];
    if (n.integer.size() <= 3) {
      while (at(j) == ',' && ascii::is_digit(at(j + 1)) && ascii::is_digit(at(j + 2)) &&
             ascii::is_digit(at(j + 3)) && !ascii::is_digit(at(j + 4))) {
        n.integer.append(s_.substr(j + 1, 3));
        n.grouped = true;
        j += 4;
      }
    }
    if (at(j) == '.' && ascii::is_digit(at(j + 1))) {
      ++j;
      while (ascii::is_digit(at(j))) n.fraction += s_[j++];
    }
    i_ = j;
    return n;
  }

  static std::string number_words(const Number& n) {
    std::string words = (n.integer.size() > 1 && n.integer[0] == '0' && !n.grouped)
                            ? digit_words(n.integer)
                            : cardinal_words(n.integer);
    if (n.decimal()) words = join({words, "point", digit_words(n.fraction)});
    return words;
  }

  // Matches an optional space and then `word` (not followed by a letter); advances past it.
  bool consume_suffix(std::string_view word, bool space_allowed, bool case_insensitive = false) {
    size_t j = i_;
    if (space_allowed && at(j) == ' ') ++j;
    std::string candidate(s_.substr(j, word.size()));
    if (case_insensitive) {
      for (char& ch : candidate) ch = lower(ch);
    }
    if (candidate != word || is_alpha(at(j + word.size()))) return false;
    i_ = j + word.size();
    return true;
  }

  struct Meridiem {
    std::string_view spoken;
    bool final_period;  // "a.m." ended the sentence: its period must stay
  };

  // "am", "pm", "a.m." or "p.m." (after an optional space) at i_; advances past it.
  std::optional<Meridiem> consume_meridiem() {
    for (auto [written, spoken] : {std::pair<std::string_view, std::string_view>{"a.m.", "AM"},
                                   {"p.m.", "PM"},
                                   {"am", "AM"},
                                   {"pm", "PM"}}) {
      if (consume_suffix(written, true, true)) {
        return Meridiem{spoken, written.size() == 4 && ends_sentence(i_ - 1, true)};
      }
    }
    return std::nullopt;
  }

  void emit_with_meridiem(std::string words, const std::optional<Meridiem>& meridiem) {
    if (meridiem) words = join({words, meridiem->spoken});
    emit_words(words);
    if (meridiem && meridiem->final_period) emit_raw('.');
  }

  void expand_number() {
    const Number n = parse_number();
    const bool plain = !n.grouped && !n.decimal();
    // Time: H:MM or HH:MM.
    if (plain && n.integer.size() <= 2 && at(i_) == ':' && ascii::is_digit(at(i_ + 1)) &&
        ascii::is_digit(at(i_ + 2)) && !ascii::is_digit(at(i_ + 3)) && at(i_ + 3) != ':') {
      const int hour = std::stoi(n.integer);
      const int minute = (at(i_ + 1) - '0') * 10 + (at(i_ + 2) - '0');
      if (hour <= 23 && minute <= 59) {
        const std::string mm(s_.substr(i_ + 1, 2));
        i_ += 3;
        const std::optional<Meridiem> meridiem = consume_meridiem();
        std::string time = cardinal_words(n.integer);
        if (minute == 0) {
          time += meridiem ? "" : " o'clock";
        } else if (minute < 10) {
          time = join({time, "oh", cardinal_words(mm)});
        } else {
          time = join({time, cardinal_words(mm)});
        }
        emit_with_meridiem(time, meridiem);
        return;
      }
    }
    if (at(i_) == '%') {
      ++i_;
      emit_words(number_words(n) + " percent");
      return;
    }
    if (plain) {
      for (std::string_view suffix : {"st", "nd", "rd", "th"}) {
        if (consume_suffix(suffix, false, true)) {
          emit_words(ordinal_words(n.integer));
          return;
        }
      }
      if (consume_suffix("s", false) || consume_suffix("'s", false)) {
        emit_words(
            plural_words(year_like(n.integer) ? year_words(n.integer) : cardinal_words(n.integer)));
        return;
      }
    }
    for (const Unit& unit : kUnits) {
      if (consume_suffix(unit.written, true)) {
        emit_words(join({number_words(n), n.is_one() ? unit.singular : unit.plural}));
        return;
      }
    }
    if (plain && n.integer.size() <= 2 && std::stoi(n.integer) >= 1 && std::stoi(n.integer) <= 12) {
      emit_with_meridiem(cardinal_words(n.integer), consume_meridiem());
      return;
    }
    if (plain && year_like(n.integer)) {
      emit_words(year_words(n.integer));
      return;
    }
    emit_words(number_words(n));
  }

  static bool year_like(const std::string& digits) {
    if (digits.size() != 4 || digits[0] == '0') return false;
    const int value = std::stoi(digits);
    return value >= 1000 && value <= 2099;
  }

  void expand_currency(const Currency& currency) {
    const Number n = parse_number();
    for (std::string_view scale : kScaleWords) {
      if (consume_suffix(scale, true)) {
        emit_words(join({number_words(n), scale, currency.major_plural}));
        return;
      }
    }
    // "$5m", "€2bn", "$10k".
    for (auto [written, scale] : {std::pair<std::string_view, std::string_view>{"k", "thousand"},
                                  {"K", "thousand"},
                                  {"m", "million"},
                                  {"M", "million"},
                                  {"bn", "billion"},
                                  {"B", "billion"}}) {
      if (consume_suffix(written, false)) {
        emit_words(join({number_words(n), scale, currency.major_plural}));
        return;
      }
    }
    if (n.fraction.size() > 2 || (n.decimal() && currency.minor_plural.empty())) {
      emit_words(join({number_words(n), currency.major_plural}));
      return;
    }
    std::string cents = n.fraction;
    if (cents.size() == 1) cents += '0';
    const bool has_cents = !cents.empty() && cents != "00";
    const std::string major = cardinal_words(n.integer);
    const std::string minor = has_cents ? cardinal_words(cents) : "";
    emit_words(join({major == "zero" && has_cents ? "" : major,
                     major == "zero" && has_cents ? ""
                     : major == "one"             ? currency.major_singular
                                                  : currency.major_plural,
                     minor,
                     !has_cents      ? ""
                     : cents == "01" ? currency.minor_singular
                                     : currency.minor_plural}));
  }

  std::string_view s_;
  size_t i_ = 0;
  std::string out_;
  bool space_after_ = false;
};

bool is_clause_end(char c) {
  return c == ',' || c == '.' || c == '!' || c == '?' || c == ';' || c == ':';
}

// Collapses runs of spaces, drops spaces before , . ! ? ; : and trims the ends.
std::string collapse_spaces(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == ' ' && (out.empty() || out.back() == ' ' || out.back() == '\n')) continue;
    if (is_clause_end(c) && !out.empty() && out.back() == ' ') out.pop_back();
    if (c == '\n' && !out.empty() && out.back() == ' ') out.pop_back();
    out += c;
  }
  while (!out.empty() && (out.back() == ' ' || out.back() == '\n')) out.pop_back();
  return out;
}

}  // namespace

void check_utf8(std::string_view text) {
  if (text.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    throw InputError("text is too long (" + std::to_string(text.size()) + " bytes)");
  }
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const auto length = static_cast<int32_t>(text.size());
  for (int32_t i = 0; i < length;) {
    const int32_t start = i;
    UChar32 c = 0;
    U8_NEXT(s, i, length, c);
    if (c < 0) {
      static constexpr char kHex[] = "0123456789abcdef";
      const uint8_t byte = s[start];
      throw InputError(std::string("text is not valid UTF-8: byte 0x") + kHex[byte >> 4] +
                       kHex[byte & 15] + " at byte offset " + std::to_string(start));
    }
  }
}

std::string clean_unicode(std::string_view text) {
  check_utf8(text);
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfkc = icu::Normalizer2::getNFKCInstance(status);
  if (U_FAILURE(status)) throw Error(std::string("ICU NFKC normaliser: ") + u_errorName(status));
  const icu::UnicodeString folded =
      nfkc->normalize(icu::UnicodeString::fromUTF8(
                          icu::StringPiece(text.data(), static_cast<int32_t>(text.size()))),
                      status);
  if (U_FAILURE(status)) throw Error(std::string("ICU NFKC normaliser: ") + u_errorName(status));

  std::string out;
  out.reserve(text.size());
  enum class Pending { None, Space, Newline } pending = Pending::None;
  auto emit = [&](std::string_view s) {
    if (pending != Pending::None && !out.empty()) out += pending == Pending::Newline ? '\n' : ' ';
    pending = Pending::None;
    out += s;
  };
  for (int32_t i = 0; i < folded.length();) {
    const UChar32 c = folded.char32At(i);
    i = folded.moveIndex32(i, 1);
    if (is_line_break(c)) {
      pending = Pending::Newline;
    } else if (c == '\t' || u_isUWhiteSpace(c)) {
      if (pending == Pending::None) pending = Pending::Space;
    } else if (std::optional<std::string_view> ascii = ascii_replacement(c)) {
      if (c == 0x2013 && !out.empty() && ascii::is_digit(out.back()) && pending == Pending::None &&
          i < folded.length() && u_isdigit(folded.char32At(i))) {
        emit(" to ");
      } else {
        emit(*ascii);
      }
    } else if (const Drop drop = drop_kind(c); drop != Drop::Keep) {
      if (drop == Drop::AsSpace && pending == Pending::None) pending = Pending::Space;
    } else {
      char buf[U8_MAX_LENGTH];
      int32_t len = 0;
      U8_APPEND_UNSAFE(buf, len, c);
      emit(std::string_view(buf, static_cast<size_t>(len)));
    }
  }
  return collapse_spaces(out);
}

bool is_english(const std::string& language) {
  return language == "en" || language.rfind("en-", 0) == 0 || language.rfind("en_", 0) == 0;
}

std::string normalize(std::string_view text, const std::string& language) {
  std::string cleaned = clean_unicode(text);
  if (!is_english(language)) return cleaned;
  return collapse_spaces(EnglishExpander(cleaned).run());
}

}  // namespace voxd::text
