#include "text/markup.h"

#include <unicode/utf8.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>
#include <utility>

#include "core/error.h"
#include "text/ascii.h"
#include "text/normalize.h"
#include "text/numbers.h"
#include "text/patterns.h"

namespace voxd::text {
namespace {

using ascii::at;
using ascii::is_alpha;
using ascii::is_digit;
using ascii::is_space;
using ascii::lower;

// How far a Markdown link's "]" or ")" is looked for, so that text full of "[" stays linear.
constexpr size_t kMaxLinkBytes = 2000;

// Letters, digits and every byte of a non-ASCII character count as word characters.
bool is_word(char c) {
  return is_alpha(c) || is_digit(c) || static_cast<unsigned char>(c) >= 0x80;
}
std::string lowered(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = lower(c);
  return out;
}
bool starts_with_nocase(std::string_view s, size_t i, std::string_view prefix) {
  if (i > s.size() || s.size() - i < prefix.size()) return false;
  for (size_t k = 0; k < prefix.size(); ++k) {
    if (lower(s[i + k]) != prefix[k]) return false;
  }
  return true;
}
std::string_view trimmed(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}
bool is_blank(std::string_view s) {
  return trimmed(s).empty();
}

// ---- Markdown ---------------------------------------------------------------------------------

size_t run_length(std::string_view s, size_t i, char c) {
  size_t n = 0;
  while (at(s, i + n) == c) ++n;
  return n;
}

// A thematic break ("---", "* * *", "___") or a setext underline ("===").
bool is_rule(std::string_view line) {
  const std::string_view t = trimmed(line);
  if (t.empty()) return false;
  const char c = t.front();
  if (c != '-' && c != '*' && c != '_' && c != '=') return false;
  size_t marks = 0;
  for (char ch : t) {
    if (ch == c) {
      ++marks;
    } else if (ch != ' ') {
      return false;
    }
  }
  return marks >= 3;
}

// For a Markdown link or image whose '[' is at `open`: the position after its "(address)" or
// "[reference]", or nullopt when it is not one.
std::optional<size_t> link_end(std::string_view s, size_t open) {
  const size_t limit = std::min(s.size(), open + kMaxLinkBytes);
  size_t close = open + 1;
  while (close < limit && s[close] != ']' && s[close] != '[') ++close;
  if (close >= limit || s[close] != ']') return std::nullopt;
  const char next = at(s, close + 1);
  if (next != '(' && next != '[') return std::nullopt;
  const char closer = next == '(' ? ')' : ']';
  int depth = 0;
  for (size_t k = close + 1; k < limit; ++k) {
    if (s[k] == next) ++depth;
    if (s[k] == closer && --depth == 0) return k + 1;
    if (s[k] == '\n') break;
  }
  return std::nullopt;
}

// Markdown's inline markup removed from one line: emphasis and strike-through marks, code
// backticks (the code is kept), links and images (their text is kept, the address dropped),
// backslash escapes. A '*' or '_' with a space on both sides ("3 * 4") or inside a word
// (snake_case, 2*3) is not emphasis and stays.
std::string strip_inline_markdown(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  // The link being read: where its label's ']' is, and where its address ends. A label holds
  // no '[', so links do not nest.
  std::optional<std::pair<size_t, size_t>> link;
  for (size_t i = 0; i < s.size();) {
    if (link && i == link->first) {
      i = link->second;
      link.reset();
      continue;
    }
    const char c = s[i];
    if (c == '\\' && i + 1 < s.size() && std::ispunct(static_cast<unsigned char>(s[i + 1]))) {
      out += s[i + 1];
      i += 2;
      continue;
    }
    if (c == '`') {
      const size_t n = run_length(s, i, '`');
      size_t close = s.find(std::string(n, '`'), i + n);
      while (close != std::string_view::npos && at(s, close + n) == '`') {
        close = s.find(std::string(n, '`'), close + run_length(s, close, '`'));
      }
      if (close != std::string_view::npos) {
        // Code is text: a '<' or '&' in it is escaped so that no tag or entity is made of it.
        for (char ch : s.substr(i + n, close - i - n)) {
          out += ch == '<'   ? std::string_view("&lt;")
                 : ch == '&' ? "&amp;"
                             : std::string_view(&ch, 1);
        }
        i = close + n;
      } else {
        i += n;  // an unmatched backtick is not read
      }
      continue;
    }
    if (c == '[' || (c == '!' && at(s, i + 1) == '[')) {
      const size_t open = c == '[' ? i : i + 1;
      if (const std::optional<size_t> end = link_end(s, open)) {
        const size_t label_end = s.find(']', open);
        link.emplace(label_end, *end);
        i = open + 1;
        continue;
      }
    }
    if (c == '*' || c == '_' || c == '~') {
      const size_t n = run_length(s, i, c);
      const char before = i == 0 ? ' ' : s[i - 1];
      const char after = i + n < s.size() ? s[i + n] : ' ';
      const bool spaced = is_space(before) && is_space(after);
      const bool inside_word = is_word(before) && is_word(after);
      if ((c != '~' || n == 2) && !spaced && !inside_word) {
        i += n;
        continue;
      }
      out.append(s.substr(i, n));
      i += n;
      continue;
    }
    out += c;
    ++i;
  }
  return out;
}

// "[id]: https://example.com "title"", which defines a reference link and is not read; "[Note]:
// read this" is text.
bool is_link_definition(std::string_view line) {
  if (at(line, 0) != '[') return false;
  const size_t close = line.find(']');
  if (close == std::string_view::npos || at(line, close + 1) != ':') return false;
  std::string_view target = trimmed(line.substr(close + 2));
  target = target.substr(0, target.find(' '));
  return target.find_first_of("/.#<") != std::string_view::npos;
}

// Markdown's block markup removed line by line: code blocks (fenced with ``` or ~~~, not read),
// headings, thematic breaks, block quotes, list markers, task boxes, tables (cells read with a
// pause between), link reference definitions.
std::string strip_markdown(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  char fence = 0;
  size_t fence_length = 0;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    const char first = at(line, 0);
    if ((first == '`' || first == '~') && run_length(line, 0, first) >= 3) {
      const size_t n = run_length(line, 0, first);
      if (fence == 0) {
        fence = first;
        fence_length = n;
      } else if (first == fence && n >= fence_length && is_blank(line.substr(n))) {
        fence = 0;
      }
      out += '\n';
      continue;
    }
    if (fence != 0) continue;
    if (is_rule(line)) {
      out += '\n';
      continue;
    }
    while (at(line, 0) == '>') {
      line.remove_prefix(1);
      while (at(line, 0) == ' ') line.remove_prefix(1);
    }
    const char marker = at(line, 0);
    const size_t hashes = run_length(line, 0, '#');
    if (hashes >= 1 && hashes <= 6 && (hashes == line.size() || line[hashes] == ' ')) {
      line.remove_prefix(hashes);
      while (!line.empty() && (line.back() == '#' || line.back() == ' ')) line.remove_suffix(1);
    } else if ((marker == '-' || marker == '*' || marker == '+') && at(line, 1) == ' ') {
      line.remove_prefix(2);
    } else {
      size_t digits = 0;
      while (digits < 4 && is_digit(at(line, digits))) ++digits;
      if (digits >= 1 && digits <= 3 && (at(line, digits) == '.' || at(line, digits) == ')') &&
          at(line, digits + 1) == ' ') {
        line.remove_prefix(digits + 2);
      }
    }
    if (line.size() >= 3 && line[0] == '[' && (line[1] == ' ' || lower(line[1]) == 'x') &&
        line[2] == ']') {
      line.remove_prefix(3);  // a task list's box
    }
    if (is_link_definition(line)) continue;
    std::string inline_text = strip_inline_markdown(line);
    if (at(line, 0) == '|') {
      if (inline_text.find_first_not_of("|-: ") == std::string::npos) continue;
      std::string_view row = trimmed(inline_text);
      while (!row.empty() && row.front() == '|') row.remove_prefix(1);
      while (!row.empty() && row.back() == '|') row.remove_suffix(1);
      std::string cells;
      for (char c : row) cells += c == '|' ? std::string(", ") : std::string(1, c);
      inline_text = cells;
    }
    out += inline_text;
    out += '\n';
  }
  return out;
}

// ---- HTML entities ----------------------------------------------------------------------------

void append_utf8(std::string& out, UChar32 c) {
  char buf[U8_MAX_LENGTH];
  int32_t length = 0;
  U8_APPEND_UNSAFE(buf, length, c);
  out.append(buf, static_cast<size_t>(length));
}

// The entity at s[i] == '&' decoded onto `out`; returns the bytes it covered, 0 if none.
size_t decode_entity(std::string_view s, size_t i, std::string& out) {
  struct Named {
    std::string_view name;
    UChar32 code;
  };
  static constexpr Named kNamed[] = {
      {"amp", '&'},       {"lt", '<'},       {"gt", '>'},       {"quot", '"'},
      {"apos", '\''},     {"nbsp", 0xA0},    {"mdash", 0x2014}, {"ndash", 0x2013},
      {"hellip", 0x2026}, {"lsquo", 0x2018}, {"rsquo", 0x2019}, {"ldquo", 0x201C},
      {"rdquo", 0x201D},  {"laquo", 0xAB},   {"raquo", 0xBB},   {"copy", 0xA9},
      {"reg", 0xAE},      {"trade", 0x2122}, {"deg", 0xB0},     {"euro", 0x20AC},
      {"pound", 0xA3},    {"yen", 0xA5},     {"cent", 0xA2},    {"times", 0xD7},
      {"divide", 0xF7},   {"middot", 0xB7},  {"bull", 0x2022},  {"shy", 0xAD},
      {"eacute", 0xE9},   {"egrave", 0xE8},  {"aacute", 0xE1},  {"agrave", 0xE0},
      {"iacute", 0xED},   {"oacute", 0xF3},  {"uacute", 0xFA},  {"ntilde", 0xF1},
      {"ccedil", 0xE7},   {"auml", 0xE4},    {"ouml", 0xF6},    {"uuml", 0xFC},
      {"szlig", 0xDF},    {"micro", 0xB5},   {"para", 0xB6},    {"sect", 0xA7}};
  // Within the longest entity's reach only: a scan to the end for every '&' would make a text
  // of ampersands quadratic.
  const size_t reach = s.substr(i + 1, 10).find(';');
  if (reach == std::string_view::npos) return 0;
  const size_t semicolon = i + 1 + reach;
  const std::string_view body = s.substr(i + 1, semicolon - i - 1);
  if (body.size() >= 2 && body[0] == '#') {
    const bool hex = lower(body[1]) == 'x';
    const std::string_view digits = body.substr(hex ? 2 : 1);
    uint32_t code = 0;
    const auto [ptr, ec] =
        std::from_chars(digits.data(), digits.data() + digits.size(), code, hex ? 16 : 10);
    if (digits.empty() || ec != std::errc() || ptr != digits.data() + digits.size()) return 0;
    if (code > 0 && code <= 0x10FFFF && !U_IS_SURROGATE(code)) {
      append_utf8(out, static_cast<UChar32>(code));
    }
    return semicolon - i + 1;
  }
  for (const Named& named : kNamed) {
    if (named.name == body) {
      append_utf8(out, named.code);
      return semicolon - i + 1;
    }
  }
  return 0;
}

std::string decode_entities(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const size_t n = s[i] == '&' ? decode_entity(s, i, out) : 0;
    if (n == 0) out += s[i++];
    i += n;
  }
  return out;
}

// ---- SSML values ------------------------------------------------------------------------------

std::optional<float> parse_float(std::string_view s) {
  float value = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size() || !(value >= 0)) {
    return std::nullopt;
  }
  return value;
}

// Milliseconds of a <break>: its time ("500ms", "1.5s") or strength; medium without either.
int break_ms(const std::optional<std::string>& time, const std::optional<std::string>& strength) {
  if (time) {
    const std::string t = lowered(trimmed(*time));
    std::optional<float> ms;
    if (t.size() > 2 && t.ends_with("ms")) {
      ms = parse_float(std::string_view(t).substr(0, t.size() - 2));
    } else if (t.size() > 1 && t.ends_with("s")) {
      if (const std::optional<float> s = parse_float(std::string_view(t).substr(0, t.size() - 1))) {
        ms = *s * 1000.0f;
      }
    }
    if (!ms) {
      throw InputError("<break time=\"" + *time + "\">: expected a duration such as 500ms or 1.5s");
    }
    if (*ms > static_cast<float>(kMaxBreakMs)) {
      throw InputError("<break time=\"" + *time + "\"> is longer than the " +
                       std::to_string(kMaxBreakMs / 1000) + " s a break may last");
    }
    return static_cast<int>(*ms + 0.5f);
  }
  static constexpr std::pair<std::string_view, int> kStrengths[] = {
      {"none", 0},     {"x-weak", 150}, {"weak", 300},
      {"medium", 500}, {"strong", 800}, {"x-strong", 1200}};
  const std::string s = strength ? lowered(trimmed(*strength)) : "medium";
  for (const auto& [name, ms] : kStrengths) {
    if (name == s) return ms;
  }
  throw InputError("<break strength=\"" + *strength +
                   "\">: expected none, x-weak, weak, medium, strong or x-strong");
}

// The speed multiplier of <prosody rate="...">.
float prosody_rate(const std::string& value) {
  static constexpr std::pair<std::string_view, float> kNamed[] = {
      {"x-slow", 0.5f},  {"slow", 0.75f}, {"medium", 1.0f},
      {"default", 1.0f}, {"fast", 1.25f}, {"x-fast", 1.5f}};
  const std::string v = lowered(trimmed(value));
  for (const auto& [name, rate] : kNamed) {
    if (name == v) return rate;
  }
  std::optional<float> rate;
  if (v.size() > 1 && v.back() == '%') {
    const char sign = v.front();
    std::string_view digits = std::string_view(v).substr(0, v.size() - 1);
    if (sign == '+' || sign == '-') digits.remove_prefix(1);
    if (std::optional<float> percent = parse_float(digits)) {
      rate = sign == '+'   ? 1.0f + *percent / 100.0f
             : sign == '-' ? 1.0f - *percent / 100.0f
                           : *percent / 100.0f;
    }
  } else {
    rate = parse_float(v);
  }
  if (!rate) {
    throw InputError("<prosody rate=\"" + value +
                     "\">: expected x-slow, slow, medium, fast, x-fast, a percentage such as "
                     "80% or +20%, or a multiplier such as 1.2");
  }
  if (*rate < kMinRate || *rate > kMaxRate) {
    throw InputError("<prosody rate=\"" + value + "\"> is outside 0.25 to 4 times the normal rate");
  }
  return *rate;
}

// ---- <say-as> ---------------------------------------------------------------------------------

constexpr std::string_view kLetterNames[] = {
    "ay", "bee", "see", "dee", "ee", "ef",  "gee", "aitch", "eye", "jay",      "kay", "el",  "em",
    "en", "oh",  "pee", "cue", "ar", "ess", "tee", "you",   "vee", "double-u", "ex",  "why", "zee"};

void append_word(std::string& out, std::string_view word) {
  if (word.empty()) return;
  if (!out.empty()) out += ' ';
  out += word;
}

// Letters by name and digits by word ("AB1" → "ay bee one"); other ASCII is not read.
std::string spelled(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    if (is_alpha(c)) {
      append_word(out, kLetterNames[lower(c) - 'a']);
    } else if (is_digit(c)) {
      append_word(out, digit_words(s.substr(i, 1)));
    } else if (static_cast<unsigned char>(c) >= 0x80) {
      size_t j = i + 1;
      while (j < s.size() && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) ++j;
      append_word(out, s.substr(i, j - i));
      i = j;
      continue;
    }
    ++i;
  }
  return out;
}

// The runs of ASCII digits in `s`.
std::vector<std::string> digit_groups(std::string_view s) {
  std::vector<std::string> groups;
  for (size_t i = 0; i < s.size();) {
    if (!is_digit(s[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < s.size() && is_digit(s[j])) ++j;
    groups.emplace_back(s.substr(i, j - i));
    i = j;
  }
  return groups;
}

// <say-as interpret-as="date" format="...">: "mdy", "dmy", "ymd" (the default: ymd when the
// text starts with four digits, else mdy), "md", "dm", "my", "ym", "d", "m", "y".
std::optional<std::string> date_words(std::string_view content, std::string format) {
  const std::vector<std::string> parts = digit_groups(content);
  if (format.empty()) format = parts.size() == 3 && parts[0].size() == 4 ? "ymd" : "mdy";
  if (parts.size() != format.size()) return std::nullopt;
  std::string year, month, day;
  for (size_t k = 0; k < format.size(); ++k) {
    std::string& field = format[k] == 'y' ? year : format[k] == 'm' ? month : day;
    if ((format[k] != 'y' && format[k] != 'm' && format[k] != 'd') || !field.empty()) {
      return std::nullopt;
    }
    field = parts[k];
  }
  if (!year.empty() && !month.empty() && !day.empty()) {
    if (year.size() != 4) return std::nullopt;
    const std::optional<Reading> reading = read_date(year + "-" + month + "-" + day, 0);
    if (!reading) return std::nullopt;
    return reading->words;
  }
  std::string out;
  if (!month.empty()) {
    if (month.size() > 2 || std::stoi(month) < 1 || std::stoi(month) > 12) return std::nullopt;
    out = month_name(std::stoi(month));
  }
  if (!day.empty()) {
    if (day.size() > 2 || std::stoi(day) < 1 || std::stoi(day) > 31) return std::nullopt;
    append_word(out, (month.empty() ? "the " : "") + ordinal_words(day));
  }
  if (!year.empty()) {
    if (year.size() > 4) return std::nullopt;
    if (!day.empty()) out += ',';
    append_word(out, year.size() == 4 ? year_words(year) : cardinal_words(year));
  }
  return out;
}

// English words for <say-as> content; nullopt when it does not fit the interpretation (then
// it is read as written).
std::optional<std::string> say_as_words(const std::string& interpret, const std::string& format,
                                        std::string_view content) {
  const std::string_view t = trimmed(content);
  if (interpret == "characters" || interpret == "spell-out" || interpret == "verbatim" ||
      interpret == "letters") {
    return spelled(t);
  }
  std::string digits;
  for (char c : t) {
    if (c != ',') digits += c;
  }
  const bool negative = !digits.empty() && digits[0] == '-';
  if (negative) digits.erase(0, 1);
  const bool numeric = !digits.empty() && std::all_of(digits.begin(), digits.end(),
                                                      [](char c) { return is_digit(c); });
  if (interpret == "cardinal" || interpret == "number") {
    if (!numeric) return std::nullopt;
    return (negative ? "minus " : "") + cardinal_words(digits);
  }
  if (interpret == "ordinal") {
    for (std::string_view suffix : {"st", "nd", "rd", "th"}) {
      if (digits.size() > 2 && lowered(digits).ends_with(suffix)) digits.resize(digits.size() - 2);
    }
    if (negative || digits.empty() || !std::all_of(digits.begin(), digits.end(), is_digit)) {
      return std::nullopt;
    }
    return ordinal_words(digits);
  }
  if (interpret == "digits") {
    const std::vector<std::string> groups = digit_groups(t);
    if (groups.empty()) return std::nullopt;
    std::string out;
    for (const std::string& group : groups) append_word(out, digit_words(group));
    return out;
  }
  if (interpret == "telephone") {
    const std::vector<std::string> groups = digit_groups(t);
    if (groups.empty()) return std::nullopt;
    std::string out = t.front() == '+' ? "plus " : "";
    for (size_t g = 0; g < groups.size(); ++g) out += (g > 0 ? ", " : "") + digit_words(groups[g]);
    return out;
  }
  if (interpret == "date") return date_words(t, lowered(format));
  return std::nullopt;
}

// ---- Tags -------------------------------------------------------------------------------------

// The attributes of a tag, names lowered, values with entities decoded.
std::vector<std::pair<std::string, std::string>> parse_attributes(std::string_view s) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (is_space(s[i]) || s[i] == '/')) ++i;
    size_t j = i;
    while (j < s.size() && !is_space(s[j]) && s[j] != '=' && s[j] != '/') ++j;
    if (j == i) break;
    std::string name = lowered(s.substr(i, j - i));
    while (j < s.size() && is_space(s[j])) ++j;
    std::string value;
    if (at(s, j) == '=') {
      ++j;
      while (j < s.size() && is_space(s[j])) ++j;
      const char quote = at(s, j);
      if (quote == '"' || quote == '\'') {
        const size_t close = s.find(quote, j + 1);
        const size_t end = close == std::string_view::npos ? s.size() : close;
        value = decode_entities(s.substr(j + 1, end - j - 1));
        j = end + 1;
      } else {
        const size_t start = j;
        while (j < s.size() && !is_space(s[j])) ++j;
        value = decode_entities(s.substr(start, j - start));
      }
    }
    out.emplace_back(std::move(name), std::move(value));
    i = j;
  }
  return out;
}

std::optional<std::string> attribute(const std::vector<std::pair<std::string, std::string>>& attrs,
                                     std::string_view name) {
  for (const auto& [key, value] : attrs) {
    if (key == name) return value;
  }
  return std::nullopt;
}

bool is_block_tag(std::string_view name) {
  static constexpr std::string_view kBlocks[] = {
      "p",      "s",      "paragraph",  "sentence",   "br",      "div",     "li",
      "ul",     "ol",     "h1",         "h2",         "h3",      "h4",      "h5",
      "h6",     "tr",     "table",      "pre",        "section", "article", "header",
      "footer", "hr",     "dd",         "dt",         "dl",      "nav",     "aside",
      "main",   "figure", "figcaption", "blockquote", "title",   "caption"};
  return std::find(std::begin(kBlocks), std::end(kBlocks), name) != std::end(kBlocks);
}

// Tags whose content is not text to read.
bool skips_content(std::string_view name) {
  return name == "script" || name == "style" || name == "head" || name == "desc" ||
         name == "noscript" || name == "svg" || name == "template";
}

class MarkupParser {
 public:
  MarkupParser(std::string_view text, bool ssml_document, bool english)
      : s_(text), ssml_document_(ssml_document), english_(english) {}

  std::vector<Span> run() {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == '<') {
        tag();
      } else if (c == '&') {
        std::string decoded;
        const size_t n = decode_entity(s_, i_, decoded);
        append(n > 0 ? std::string_view(decoded) : std::string_view("&"));
        i_ += n > 0 ? n : 1;
      } else {
        append(c == '\n' && ssml_document_ ? std::string_view(" ") : s_.substr(i_, 1));
        ++i_;
      }
    }
    if (collecting_) finish_collecting();
    flush();
    return std::move(spans_);
  }

 private:
  void append(std::string_view text) { (collecting_ ? collected_ : current_) += text; }

  void flush() {
    if (!is_blank(current_)) spans_.push_back(Span{std::move(current_), rate(), 0});
    current_.clear();
  }

  float rate() const { return rates_.empty() ? 1.0f : rates_.back(); }

  // Opens a <prosody> of rate `r` (times the enclosing one), or closes the innermost; text
  // before a change of rate ends its span.
  void push_rate(float r) {
    const float next = std::clamp(rate() * r, kMinRate, kMaxRate);
    if (next != rate()) flush();
    rates_.push_back(next);
  }
  void pop_rate() {
    if (rates_.empty()) return;
    const float outer = rates_.size() > 1 ? rates_[rates_.size() - 2] : 1.0f;
    if (outer != rate()) flush();  // the text so far is at the inner rate
    rates_.pop_back();
  }

  void add_break(int ms) {
    flush();
    if (!spans_.empty()) spans_.back().pause_after_ms = add_pause(spans_.back().pause_after_ms, ms);
  }

  void finish_collecting() {
    collecting_ = false;
    std::optional<std::string> words;
    if (collected_kind_ == "sub") {
      if (collected_has_alias_) words = collected_alias_;
    } else if (english_) {
      words = say_as_words(collected_interpret_, collected_format_, collected_);
    }
    append(words ? *words : collected_);
    collected_.clear();
  }

  // The position of the '>' that ends a tag whose attributes start at `j`, or, for a malformed
  // tag, nullopt and in `resume` where text starts again (the next '<', line break or end).
  std::optional<size_t> tag_end(size_t j, size_t& resume) const {
    char quote = 0;
    for (size_t k = j; k < s_.size(); ++k) {
      const char c = s_[k];
      if (quote != 0) {
        // XML values hold no '<': stopping there keeps a run of broken tags linear.
        if (c == '<') {
          resume = k;
          return std::nullopt;
        }
        if (c == quote) quote = 0;
        if (c == '\n' && !ssml_document_) break;
        continue;
      }
      if (c == '"' || c == '\'') {
        quote = c;
      } else if (c == '>') {
        return k;
      } else if (c == '<' || (c == '\n' && !ssml_document_)) {
        resume = k;
        return std::nullopt;
      }
    }
    resume = std::min(s_.find('\n', j), s_.size());
    return std::nullopt;
  }

  void skip_past(std::string_view terminator, size_t from) {
    const size_t end = s_.find(terminator, from);
    i_ = end == std::string_view::npos ? s_.size() : end + terminator.size();
  }

  void tag() {
    if (s_.substr(i_, 4) == "<!--") return skip_past("-->", i_ + 4);
    if (s_.substr(i_, 9) == "<![CDATA[") {
      const size_t end = s_.find("]]>", i_ + 9);
      const size_t stop = end == std::string_view::npos ? s_.size() : end;
      append(s_.substr(i_ + 9, stop - i_ - 9));
      i_ = end == std::string_view::npos ? s_.size() : end + 3;
      return;
    }
    const bool declaration = at(s_, i_ + 1) == '!' || at(s_, i_ + 1) == '?';
    const bool closing = at(s_, i_ + 1) == '/';
    size_t j = i_ + 1 + (closing || declaration ? 1 : 0);
    if (!declaration && !is_alpha(at(s_, j))) {
      append("<");  // "a < b", "<3"
      ++i_;
      return;
    }
    const size_t name_start = j;
    while (is_alpha(at(s_, j)) || is_digit(at(s_, j)) || at(s_, j) == '-' || at(s_, j) == ':' ||
           at(s_, j) == '_' || at(s_, j) == '.') {
      ++j;
    }
    std::string name = lowered(s_.substr(name_start, j - name_start));
    const bool scheme = !name.empty() && name.back() == ':' && s_.substr(j, 2) == "//";
    if (!closing && !declaration && (scheme || at(s_, j) == '@')) {
      // An autolink, <https://example.com> or <jane@example.com>: its address is read.
      size_t k = j;
      while (k < s_.size() && s_[k] != '>' && !is_space(s_[k]) && s_[k] != '<') ++k;
      if (at(s_, k) == '>') {
        append(" ");
        append(s_.substr(i_ + 1, k - i_ - 1));
        append(" ");
        i_ = k + 1;
        return;
      }
    }
    size_t resume = 0;
    const std::optional<size_t> end = tag_end(j, resume);
    if (!end) {
      i_ = resume;  // malformed: dropped, never read
      return;
    }
    std::string_view attributes = s_.substr(j, *end - j);
    const bool self_closing = !attributes.empty() && attributes.back() == '/';
    i_ = *end + 1;
    if (declaration) return;
    if (collecting_) {
      if (closing && name == collected_kind_) finish_collecting();
      return;
    }
    handle(name, closing, self_closing, parse_attributes(attributes));
  }

  void handle(const std::string& name, bool closing, bool self_closing,
              const std::vector<std::pair<std::string, std::string>>& attrs) {
    if (is_block_tag(name)) {
      append("\n");
    } else if (name == "td" || name == "th") {
      if (closing) append(", ");
    } else if (skips_content(name)) {
      if (!closing && !self_closing) skip_past("</" + name, i_);
      if (!closing && !self_closing) skip_past(">", i_);
    } else if (name == "break") {
      if (!closing) add_break(break_ms(attribute(attrs, "time"), attribute(attrs, "strength")));
    } else if (name == "img") {
      if (const std::optional<std::string> alt = attribute(attrs, "alt")) {
        append(" " + *alt + " ");
      }
    } else if (name == "prosody") {
      if (closing) {
        pop_rate();
      } else if (!self_closing) {
        const std::optional<std::string> value = attribute(attrs, "rate");
        push_rate(value ? prosody_rate(*value) : 1.0f);
      }
    } else if ((name == "say-as" || name == "sub") && !closing) {
      const std::optional<std::string> alias = attribute(attrs, "alias");
      if (self_closing) {
        if (name == "sub" && alias) append(*alias);
        return;
      }
      collecting_ = true;
      collected_kind_ = name;
      collected_alias_ = alias.value_or("");
      collected_has_alias_ = alias.has_value();
      collected_interpret_ = lowered(attribute(attrs, "interpret-as").value_or(""));
      collected_format_ = attribute(attrs, "format").value_or("");
    }
  }

  std::string_view s_;
  bool ssml_document_;
  bool english_;
  size_t i_ = 0;
  std::vector<Span> spans_;
  std::string current_;
  std::vector<float> rates_;
  bool collecting_ = false;  // inside <say-as> or <sub>
  bool collected_has_alias_ = false;
  std::string collected_;
  std::string collected_kind_, collected_alias_, collected_interpret_, collected_format_;
};

bool is_ssml_document(std::string_view text) {
  const std::string_view t = trimmed(text);
  return starts_with_nocase(t, 0, "<?xml") ||
         (starts_with_nocase(t, 0, "<speak") && (is_space(at(t, 6)) || at(t, 6) == '>'));
}

}  // namespace

std::vector<Span> parse_markup(std::string_view text, const std::string& language) {
  if (is_ssml_document(text)) return MarkupParser(text, true, is_english(language)).run();
  const std::string plain = strip_markdown(text);
  return MarkupParser(plain, false, is_english(language)).run();
}

}  // namespace voxd::text
