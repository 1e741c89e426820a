// English readings of the written forms the normaliser recognises as a whole: dates, phone
// numbers, web addresses and e-mail addresses (docs/text-frontend.md lists the forms).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace voxd::text {

// A form found at some offset of a text: how many bytes it covers and its words.
struct Reading {
  size_t length = 0;
  std::string words;
};

// True for an English month name as written in a date ("March").
bool is_month_name(std::string_view word);

// "January" for 1 … "December" for 12.
std::string_view month_name(int month);

// Each reader looks at `text` from byte `start`, which the caller has checked is the start of
// a word; nullopt when no whole form starts there. Each looks at a bounded number of bytes.

// "2024-03-05", "2024/03/05" (year first); "03/05/2024", "3-5-2024" (month first, US order,
// unless the first number cannot be a month: "25/12/2024"); "05.03.2024" (day first, European)
// → "March fifth, twenty twenty-four". Impossible dates (2023-02-29) are not dates.
std::optional<Reading> read_date(std::string_view text, size_t start);

// "+1 (555) 123-4567", "+44 20 7946 0958", "(555) 123 4567", "555-123-4567", "555.123.4567",
// "1-800-555-1234", "555-1234", with an optional extension ("x12", "ext. 12") → the digits one
// by one, a pause between groups: "plus one, five five five, one two three, four five six seven".
std::optional<Reading> read_phone_number(std::string_view text, size_t start);

// "https://example.com/a-b", "www.example.com", "example.com/docs" (a host ending in a known
// top-level domain) → "example dot com slash a b": the scheme, query and fragment are not read,
// path words are read as words.
std::optional<Reading> read_url(std::string_view text, size_t start);

// "jane.doe+news@example.co.uk" → "jane dot doe plus news at example dot co dot uk".
std::optional<Reading> read_email(std::string_view text, size_t start);

}  // namespace voxd::text
