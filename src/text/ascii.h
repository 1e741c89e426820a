// ASCII character classes for the front end's byte-level scanners. Bytes of multi-byte UTF-8
// characters (0x80 and above) are never ASCII letters, digits or spaces.
#pragma once

#include <cstddef>
#include <string_view>

namespace voxd::text::ascii {

inline bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
inline bool is_upper(char c) {
  return c >= 'A' && c <= 'Z';
}
inline bool is_alpha(char c) {
  return is_upper(c) || (c >= 'a' && c <= 'z');
}
inline bool is_alnum(char c) {
  return is_digit(c) || is_alpha(c);
}
// Space, tab, line feed, carriage return, form feed.
inline bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f';
}
inline char lower(char c) {
  return is_upper(c) ? static_cast<char>(c - 'A' + 'a') : c;
}
// Whether `s` is empty or only white space (is_space, and the vertical tab).
inline bool is_blank(std::string_view s) {
  return s.find_first_not_of(" \t\n\r\f\v") == std::string_view::npos;
}
// s[i], or '\0' past its end.
inline char at(std::string_view s, size_t i) {
  return i < s.size() ? s[i] : '\0';
}

}  // namespace voxd::text::ascii
