#include "backends/registry.h"

#include "backends/cpu/cpu_backend.h"
#include "backends/reference/reference_backend.h"
#include "core/error.h"

namespace voxd {

std::vector<std::string> backend_names() {
  return {"cpu", "reference"};
}

std::unique_ptr<Backend> make_backend(const std::string& name, int threads) {
  if (name == "cpu") return std::make_unique<CpuBackend>(threads);
  if (name == "reference") return std::make_unique<ReferenceBackend>();
  std::string known;
  for (const std::string& n : backend_names()) known += (known.empty() ? "" : ", ") + n;
  throw InputError("unknown backend '" + name + "'; known backends: " + known);
}

}  // namespace voxd
