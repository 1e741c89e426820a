#include "text/ids.h"

#include <charconv>
#include <string>

#include "core/error.h"

namespace voxd::text {

std::vector<int64_t> parse_ids(std::string_view text) {
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  size_t begin = 0;
  size_t end = text.size();
  while (begin < end && is_space(text[begin])) ++begin;
  while (end > begin && is_space(text[end - 1])) --end;
  if (begin < end && text[begin] == '[') {
    if (text[end - 1] != ']')
      throw InputError("ids: '[' at offset " + std::to_string(begin) + " has no closing ']'");
    ++begin;
    --end;
  }
  std::vector<int64_t> ids;
  bool after_id = false;  // an id came since the last comma
  size_t last_comma = 0;
  for (size_t i = begin; i < end;) {
    const char c = text[i];
    if (is_space(c)) {
      ++i;
    } else if (c == ',') {
      if (!after_id)
        throw InputError("ids: ',' without an id before it at offset " + std::to_string(i));
      last_comma = i++;
      after_id = false;
    } else if (c >= '0' && c <= '9') {
      int64_t value = 0;
      const auto [ptr, ec] = std::from_chars(text.data() + i, text.data() + end, value);
      if (ec == std::errc::result_out_of_range) {
        throw InputError("ids: number at offset " + std::to_string(i) + " is too large");
      }
      i = static_cast<size_t>(ptr - text.data());
      ids.push_back(value);
      after_id = true;
    } else {
      throw InputError("ids: unexpected '" + std::string(1, c) + "' at offset " +
                       std::to_string(i) + " (expected ids separated by spaces or commas)");
    }
  }
  if (ids.empty()) throw InputError("ids: no ids given");
  if (!after_id) throw InputError("ids: trailing ',' at offset " + std::to_string(last_comma));
  return ids;
}

}  // namespace voxd::text
