#include "text/patterns.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <vector>

#include "text/ascii.h"
#include "text/numbers.h"

namespace voxd::text {
namespace {

using ascii::at;
using ascii::is_alnum;
using ascii::is_alpha;
using ascii::is_digit;
using ascii::lower;

constexpr std::array<std::string_view, 12> kMonths{"January",   "February", "March",    "April",
                                                   "May",       "June",     "July",     "August",
                                                   "September", "October",  "November", "December"};

// Top-level domains that make a bare "name.tld" a web address.
constexpr std::string_view kTopLevelDomains[] = {
    "com", "org", "net", "edu", "gov", "mil",  "int", "io",   "ai",     "dev",  "app", "co",
    "uk",  "us",  "de",  "fr",  "eu",  "info", "biz", "me",   "tv",     "ca",   "au",  "jp",
    "cn",  "ru",  "nl",  "se",  "es",  "ch",   "xyz", "tech", "online", "site", "gg",  "ly"};

// The longest host name (RFC 1035) and e-mail local part (RFC 5321) looked at.
constexpr size_t kMaxHost = 253;
constexpr size_t kMaxLocalPart = 64;

bool starts_with_nocase(std::string_view s, size_t i, std::string_view prefix) {
  if (s.size() - std::min(i, s.size()) < prefix.size()) return false;
  for (size_t k = 0; k < prefix.size(); ++k) {
    if (lower(s[i + k]) != prefix[k]) return false;
  }
  return true;
}

// The number of ASCII digits at `i`, counting no further than `limit`.
size_t digit_run(std::string_view s, size_t i, size_t limit) {
  size_t n = 0;
  while (n < limit && is_digit(at(s, i + n))) ++n;
  return n;
}

int to_int(std::string_view digits) {
  int n = 0;
  for (char c : digits) n = n * 10 + (c - '0');
  return n;
}

int days_in_month(int month, int year) {
  static constexpr std::array<int, 12> kDays{31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  return month == 2 && leap ? 29 : kDays[static_cast<size_t>(month - 1)];
}

void append_word(std::string& out, std::string_view word) {
  if (word.empty()) return;
  if (!out.empty() && out.back() != ' ') out += ' ';
  out += word;
}

// Words for one piece of an address: letters as written, digits one by one, the separators
// named ('.' dot, '-' dash, '_' underscore, '+' plus) or, with `separators_as_space`, '-' '_'
// '+' and anything else read as a space (path words: "a-b" → "a b").
std::string address_words(std::string_view s, bool separators_as_space) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    size_t j = i + 1;
    if (is_alpha(c) || static_cast<unsigned char>(c) >= 0x80) {
      while (j < s.size() && (is_alpha(s[j]) || static_cast<unsigned char>(s[j]) >= 0x80)) ++j;
      append_word(out, s.substr(i, j - i));
    } else if (is_digit(c)) {
      while (j < s.size() && is_digit(s[j])) ++j;
      append_word(out, digit_words(s.substr(i, j - i)));
    } else if (c == '.') {
      append_word(out, "dot");
    } else if (c == '%' && j + 1 < s.size() && std::isxdigit(static_cast<unsigned char>(s[j])) &&
               std::isxdigit(static_cast<unsigned char>(s[j + 1]))) {
      j += 2;  // a percent-encoded byte ("%20") reads as a space
    } else if (!separators_as_space) {
      append_word(out, c == '-'   ? "dash"
                       : c == '_' ? "underscore"
                       : c == '+' ? "plus"
                       : c == '%' ? "percent"
                                  : "");
    } else if (c == '~') {
      append_word(out, "tilde");
    }
    i = j;
  }
  return out;
}

// A host name at `i`: labels of letters, digits and '-' joined by single dots.
struct Host {
  size_t length = 0;
  size_t labels = 0;
  std::string_view last;  // the last label
};

std::optional<Host> read_host(std::string_view s, size_t i) {
  Host host;
  size_t j = i;
  while (true) {
    size_t k = j;
    while (k - i < kMaxHost && (is_alnum(at(s, k)) || at(s, k) == '-')) ++k;
    if (k == j) break;
    ++host.labels;
    host.last = s.substr(j, k - j);
    host.length = k - i;
    if (at(s, k) != '.' || !is_alnum(at(s, k + 1)) || k - i >= kMaxHost) break;
    j = k + 1;
  }
  if (host.labels == 0) return std::nullopt;
  return host;
}

bool is_top_level_domain(std::string_view label) {
  for (std::string_view tld : kTopLevelDomains) {
    if (label.size() != tld.size()) continue;
    bool same = true;
    for (size_t k = 0; k < tld.size(); ++k) same = same && lower(label[k]) == tld[k];
    if (same) return true;
  }
  return false;
}

bool all_letters(std::string_view s) {
  for (char c : s) {
    if (!is_alpha(c)) return false;
  }
  return !s.empty();
}

// Characters that end a web address (besides whitespace and the end of the text).
bool ends_url(char c) {
  return c == '\0' || c == ' ' || c == '\n' || c == '\t' || c == '"' || c == '<' || c == '>' ||
         c == '`' || c == '|' || c == '{' || c == '}' || c == '\\' || c == '^';
}

}  // namespace

bool is_month_name(std::string_view word) {
  return std::find(kMonths.begin(), kMonths.end(), word) != kMonths.end();
}

std::string_view month_name(int month) {
  return kMonths.at(static_cast<size_t>(month - 1));
}

std::optional<Reading> read_date(std::string_view text, size_t start) {
  const size_t n1 = digit_run(text, start, 5);
  if (n1 == 0 || n1 == 3 || n1 > 4) return std::nullopt;
  const char sep = at(text, start + n1);
  if (sep != '-' && sep != '/' && sep != '.') return std::nullopt;
  const size_t i2 = start + n1 + 1;
  const size_t n2 = digit_run(text, i2, 3);
  if (n2 == 0 || n2 > 2 || at(text, i2 + n2) != sep) return std::nullopt;
  const size_t i3 = i2 + n2 + 1;
  const size_t n3 = digit_run(text, i3, 5);
  size_t end = i3 + n3;
  // An ISO date with a time, "2024-03-05T10:30": the time is read after "at".
  const bool time_follows = n1 == 4 && at(text, end) == 'T' && is_digit(at(text, end + 1));
  if (!time_follows &&
      (is_alpha(at(text, end)) || static_cast<unsigned char>(at(text, end)) >= 0x80)) {
    return std::nullopt;
  }
  const char after = at(text, end);
  if ((after == '-' || after == '/' || after == '.' || after == ':') &&
      is_digit(at(text, end + 1))) {
    return std::nullopt;  // more numbers follow: an IP address, a version, a time
  }
  const int a = to_int(text.substr(start, n1));
  const int b = to_int(text.substr(i2, n2));
  const int c = to_int(text.substr(i3, n3));
  int year = 0, month = 0, day = 0;
  std::string_view year_digits;
  if (n1 == 4 && (n3 == 1 || n3 == 2)) {
    year_digits = text.substr(start, n1);
    year = a, month = b, day = c;
  } else if (n1 <= 2 && n3 == 4) {
    year_digits = text.substr(i3, n3);
    year = c;
    if (sep == '.' || a > 12) {
      day = a, month = b;
    } else {
      month = a, day = b;
    }
  } else {
    return std::nullopt;
  }
  if (year < 1000 || month < 1 || month > 12 || day < 1 || day > days_in_month(month, year)) {
    return std::nullopt;
  }
  std::string words = std::string(kMonths[static_cast<size_t>(month - 1)]) + " " +
                      ordinal_words(std::to_string(day)) + ", " + year_words(year_digits);
  if (time_follows) {
    words += " at";
    ++end;
  }
  return Reading{end - start, words};
}

std::optional<Reading> read_phone_number(std::string_view text, size_t start) {
  size_t j = start;
  const bool plus = at(text, j) == '+';
  if (plus) ++j;
  std::vector<std::string_view> groups;
  std::string separators;  // separators[k] comes before groups[k + 1]
  int paren_group = -1;
  size_t digits = 0;
  while (true) {
    std::string_view group;
    if (at(text, j) == '(') {
      const size_t n = digit_run(text, j + 1, 5);
      if (n == 0 || at(text, j + 1 + n) != ')' || paren_group >= 0) return std::nullopt;
      paren_group = static_cast<int>(groups.size());
      group = text.substr(j + 1, n);
      j += n + 2;
    } else {
      const size_t n = digit_run(text, j, 9);
      if (n == 0) return std::nullopt;
      group = text.substr(j, n);
      j += n;
    }
    digits += group.size();
    if (digits > 15 || groups.size() == 6) return std::nullopt;
    groups.push_back(group);
    const char c = at(text, j);
    const char next = at(text, j + 1);
    const bool spaces_allowed = plus || paren_group >= 0;
    if ((c == '-' || c == '.' || (c == ' ' && spaces_allowed)) && (is_digit(next) || next == '(')) {
      separators += c;
      ++j;
    } else if (c == '(' || (text[j - 1] == ')' && is_digit(c))) {
      separators += ' ';
    } else {
      break;
    }
  }
  if (is_alnum(at(text, j))) return std::nullopt;
  std::vector<size_t> sizes;
  for (std::string_view g : groups) sizes.push_back(g.size());
  if (plus) {
    if (groups.size() < 2 || sizes[0] > 3 || digits < 8 || paren_group == 0) return std::nullopt;
  } else if (paren_group >= 0) {
    if (paren_group != 0 || sizes != std::vector<size_t>{3, 3, 4}) return std::nullopt;
  } else {
    const bool same = separators.find_first_not_of(separators[0]) == std::string::npos;
    const bool dashes = same && separators[0] == '-';
    const bool dots = same && separators[0] == '.';
    const bool shape_ok = ((dashes || dots) && sizes == std::vector<size_t>{3, 3, 4}) ||
                          (dashes && sizes == std::vector<size_t>{1, 3, 3, 4}) ||
                          (dashes && sizes == std::vector<size_t>{3, 4});
    if (!shape_ok) return std::nullopt;
  }
  std::string words;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (g > 0) words += ", ";
    if (g == 0 && plus) words += "plus ";
    words += digit_words(groups[g]);
  }
  // An extension: " x12", " ext. 12", "ext 12".
  size_t k = j + (at(text, j) == ' ' ? 1 : 0);
  size_t marker = 0;
  if (lower(at(text, k)) == 'x' && is_digit(at(text, k + 1))) {
    marker = 1;
  } else if (starts_with_nocase(text, k, "ext")) {
    marker = at(text, k + 3) == '.' ? 4 : 3;
  }
  if (marker > 0) {
    size_t m = k + marker;
    if (at(text, m) == ' ') ++m;
    const size_t n = digit_run(text, m, 7);
    if (n > 0 && n <= 6 && !is_alnum(at(text, m + n))) {
      words += ", extension " + digit_words(text.substr(m, n));
      j = m + n;
    }
  }
  return Reading{j - start, words};
}

std::optional<Reading> read_url(std::string_view text, size_t start) {
  size_t j = start;
  bool scheme = false;
  for (std::string_view prefix : {"https://", "http://", "ftp://"}) {
    if (starts_with_nocase(text, j, prefix)) {
      j += prefix.size();
      scheme = true;
      break;
    }
  }
  const bool www = starts_with_nocase(text, j, "www.");
  const std::optional<Host> host = read_host(text, j);
  if (!host) return std::nullopt;
  if (!scheme && (host->labels < 2 || (!www && !is_top_level_domain(host->last)))) {
    return std::nullopt;
  }
  if (!scheme && !www && !all_letters(host->last)) return std::nullopt;
  std::string words = address_words(text.substr(j, host->length), false);
  j += host->length;
  if (at(text, j) == ':' && is_digit(at(text, j + 1))) {
    const size_t n = digit_run(text, j + 1, 6);
    words += " colon " + digit_words(text.substr(j + 1, n));
    j += n + 1;
  }
  if (at(text, j) != '/' && at(text, j) != '?' && at(text, j) != '#') {
    if (is_alnum(at(text, j)) || at(text, j) == '@') return std::nullopt;
    return Reading{j - start, words};
  }
  // The rest runs to whitespace; closing punctuation at its end belongs to the sentence.
  size_t end = j;
  int open_parens = 0;
  while (!ends_url(at(text, end))) {
    if (text[end] == '(') ++open_parens;
    if (text[end] == ')') --open_parens;
    ++end;
  }
  while (end > j) {
    const char last = text[end - 1];
    const bool closing = last == '.' || last == ',' || last == ';' || last == ':' || last == '!' ||
                         last == '?' || last == '\'' || (last == ')' && open_parens < 0);
    if (!closing) break;
    if (last == ')') ++open_parens;
    --end;
  }
  std::string_view path = text.substr(j, end - j);
  path = path.substr(0, path.find_first_of("?#"));
  for (size_t i = 0; i < path.size();) {
    size_t slash = path.find('/', i + 1);
    if (slash == std::string_view::npos) slash = path.size();
    const std::string segment = address_words(path.substr(i + 1, slash - i - 1), true);
    if (!segment.empty()) words += " slash " + segment;
    i = slash;
  }
  return Reading{end - start, words};
}

std::optional<Reading> read_email(std::string_view text, size_t start) {
  size_t j = start;
  auto is_local = [](char c) {
    return is_alnum(c) || c == '.' || c == '_' || c == '%' || c == '+' || c == '-';
  };
  while (j - start <= kMaxLocalPart && is_local(at(text, j))) ++j;
  if (j == start || j - start > kMaxLocalPart || at(text, j) != '@') return std::nullopt;
  const std::string_view local = text.substr(start, j - start);
  if (local.front() == '.' || local.back() == '.' || !is_alnum(local.front())) {
    return std::nullopt;
  }
  const std::optional<Host> host = read_host(text, j + 1);
  if (!host || host->labels < 2 || host->last.size() < 2 || !all_letters(host->last)) {
    return std::nullopt;
  }
  const size_t end = j + 1 + host->length;
  if (at(text, end) == '@' || is_alnum(at(text, end))) return std::nullopt;
  return Reading{end - start, address_words(local, false) + " at " +
                                  address_words(text.substr(j + 1, host->length), false)};
}

}  // namespace voxd::text
