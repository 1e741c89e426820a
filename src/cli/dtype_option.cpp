#include "cli/dtype_option.h"

#include "core/error.h"

namespace voxd {

DType parse_dtype_option(const std::string& name, const std::string& option) {
  if (name == "f32") return DType::F32;
  if (name == "f16") return DType::F16;
  if (name == "bf16") return DType::BF16;
  throw InputError(option + ": expected f32, f16 or bf16, got '" + name + "'");
}

}  // namespace voxd
