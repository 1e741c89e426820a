#include "cli/finite_number.h"

#include <charconv>
#include <cmath>
#include <string>

namespace voxd {

CLI::Validator finite_number() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        double number = 0;
        const char* end = value.data() + value.size();
        const auto [ptr, error] = std::from_chars(value.data(), end, number);
        if (error != std::errc() || ptr != end || !std::isfinite(number)) {
          return "must be a finite number, got " + value;
        }
        return {};
      },
      "FINITE");
}

}  // namespace voxd
