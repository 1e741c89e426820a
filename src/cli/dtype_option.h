// The --dtype option of voxd's commands: the lower-case names f32, f16 and bf16.
#pragma once

#include <string>

#include "core/dtype.h"

namespace voxd {

// The dtype `name` (f32, f16 or bf16) stands for; throws voxd::InputError naming `option`
// otherwise.
DType parse_dtype_option(const std::string& name, const std::string& option);

}  // namespace voxd
