#include "core/memory_limit.h"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/memory_summary.h"

namespace voxd {
namespace {

constexpr const char* kForms =
    "expected a byte count (8000000000), a size with a unit (512MiB, 8GiB, 8GB) or a fraction of "
    "the device's memory (0.5)";
// Amounts above this cannot be meant (and could not be rounded by the allocator).
constexpr uint64_t kMaxBytes = uint64_t{1} << 60;

struct Unit {
  const char* name;
  uint64_t factor;
};
constexpr std::array<Unit, 9> kUnits = {{
    {"b", 1},
    {"kb", 1000},
    {"mb", 1000 * 1000},
    {"gb", 1000 * 1000 * 1000},
    {"tb", uint64_t{1000} * 1000 * 1000 * 1000},
    {"kib", uint64_t{1} << 10},
    {"mib", uint64_t{1} << 20},
    {"gib", uint64_t{1} << 30},
    {"tib", uint64_t{1} << 40},
}};

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  return text;
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

MemoryAmount MemoryAmount::parse(std::string_view text, std::string_view option, Zero zero) {
  const std::string name(option);
  const std::string_view value = trim(text);
  const auto fail = [&](const std::string& what) -> MemoryAmount {
    throw InputError(name + ": " + what + "; " + kForms);
  };
  if (value.empty()) return fail("empty value");

  // The number: digits with at most one decimal point; the unit follows, maybe after spaces.
  size_t end = 0;
  bool has_point = false;
  while (end < value.size() && (std::isdigit(static_cast<unsigned char>(value[end])) ||
                                (value[end] == '.' && !has_point))) {
    has_point = has_point || value[end] == '.';
    ++end;
  }
  const std::string_view number = value.substr(0, end);
  const std::string unit = lower(trim(value.substr(end)));
  std::string quoted(1, '\'');  // built by appending: GCC 12 warns wrongly on "'" + string
  quoted.append(value);
  quoted += '\'';
  if (number.empty() || number == ".") return fail(quoted + " does not start with a number");

  double real = 0;
  const auto [real_end, real_error] =
      std::from_chars(number.data(), number.data() + number.size(), real, std::chars_format::fixed);
  if (real_error != std::errc() || real_end != number.data() + number.size()) {
    return fail(quoted + " is not a number");
  }

  if (unit.empty() && has_point) {
    if (!(real > 0 && real <= 1)) {
      return fail(quoted + " is not a fraction in (0, 1] (a byte count has no decimal point)");
    }
    return MemoryAmount(0, real, true, name);
  }

  uint64_t factor = 0;
  for (const Unit& u : kUnits) {
    if (unit == u.name) factor = u.factor;
  }
  if (unit.empty()) factor = 1;
  if (factor == 0) return fail("unknown unit in " + quoted);

  uint64_t result = 0;
  if (has_point) {
    const double scaled = std::floor(real * static_cast<double>(factor));
    if (scaled > static_cast<double>(kMaxBytes)) return fail(quoted + " is too large");
    result = static_cast<uint64_t>(scaled);
  } else {
    uint64_t integer = 0;
    const auto [int_end, int_error] =
        std::from_chars(number.data(), number.data() + number.size(), integer);
    if (int_error != std::errc() || int_end != number.data() + number.size() ||
        integer > kMaxBytes / factor) {
      return fail(quoted + " is too large");
    }
    result = integer * factor;
  }
  if (result == 0 && zero == Zero::kRefused) {
    return fail(quoted + " is zero bytes; give a positive amount");
  }
  return MemoryAmount(result, 0, false, name);
}

MemoryAmount MemoryAmount::bytes(uint64_t bytes) {
  return MemoryAmount(bytes, 0, false, "memory amount");
}

MemoryAmount MemoryAmount::fraction(double fraction) {
  if (!(fraction > 0 && fraction <= 1)) {
    throw InputError("memory fraction " + std::to_string(fraction) + " is not in (0, 1]");
  }
  return MemoryAmount(0, fraction, true, "memory amount");
}

uint64_t MemoryAmount::resolve(uint64_t total) const {
  if (!is_fraction_) return bytes_;
  if (total == 0) {
    throw InputError(option_ + ": " + to_string() +
                     " needs the device's total memory, which is unknown here; give bytes "
                     "(e.g. 8GiB) instead");
  }
  return static_cast<uint64_t>(std::floor(fraction_ * static_cast<double>(total)));
}

std::string MemoryAmount::to_string() const {
  if (!is_fraction_) return format_bytes(bytes_);
  char text[48];
  std::snprintf(text, sizeof(text), "%.1f %% of the device", 100 * fraction_);
  return text;
}

}  // namespace voxd
