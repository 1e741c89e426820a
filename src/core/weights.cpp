#include "core/weights.h"

#include "core/error.h"

namespace voxd {

Tensor TensorMapSource::get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw Error(describe() + ": missing tensor '" + name + "'");
  return it->second;
}

std::vector<std::string> TensorMapSource::names() const {
  std::vector<std::string> out;
  for (const auto& [name, tensor] : tensors_) out.push_back(name);
  return out;
}

}  // namespace voxd
