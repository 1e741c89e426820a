// A check for voxd's real-valued options: CLI11's Range and PositiveNumber compare, and every
// comparison with NaN is false, so "nan" passes them; "inf" passes an open range.
#pragma once

#include <CLI/CLI.hpp>

namespace voxd {

// Accepts finite numbers only ("--request-timeout: must be a finite number, got nan").
CLI::Validator finite_number();

}  // namespace voxd
