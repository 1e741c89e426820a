#include "cli/finite_number.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>

namespace voxd {

CLI::Validator finite_number() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        // strtod, as CLI11's own conversion: a sign, spaces around and exponents are taken.
        const char* begin = value.c_str();
        char* end = nullptr;
        const double number = std::strtod(begin, &end);
        while (std::isspace(static_cast<unsigned char>(*end))) ++end;
        if (end == begin || *end != '\0' || !std::isfinite(number)) {
          return "must be a finite number, got " + value;
        }
        return {};
      },
      "FINITE");
}

}  // namespace voxd
