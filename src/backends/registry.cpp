#include "backends/registry.h"

#include "backends/cpu/cpu_backend.h"
#include "backends/reference/reference_backend.h"
#include "core/error.h"
#ifdef VOXD_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace voxd {
namespace {

// "cuda" -> 0, "cuda:N" -> N; anything else after "cuda" throws voxd::InputError.
int cuda_index(const std::string& name) {
  const std::string digits = name.size() > 5 ? name.substr(5) : "";
  if (name == "cuda") return 0;
  if (name[4] != ':' || digits.empty() || digits.size() > 4 ||
      digits.find_first_not_of("0123456789") != std::string::npos) {
    throw InputError("bad CUDA backend name '" + name + "'; expected cuda or cuda:N");
  }
  return std::stoi(digits);
}

}  // namespace

std::vector<std::string> backend_names() {
#ifdef VOXD_HAVE_CUDA
  return {"cpu", "reference", "cuda", "cuda:N"};
#else
  return {"cpu", "reference"};
#endif
}

std::unique_ptr<Backend> make_backend(const std::string& name, int threads,
                                      QueuePriority priority) {
  if (name == "cpu") return std::make_unique<CpuBackend>(threads);
  if (name == "reference") return std::make_unique<ReferenceBackend>();
  if (name.rfind("cuda", 0) == 0) {
    const int index = cuda_index(name);
#ifdef VOXD_HAVE_CUDA
    return std::make_unique<CudaBackend>(index, priority);
#else
    (void)priority;
    throw InputError("backend '" + name + "' (device " + std::to_string(index) +
                     ") is not available: voxd was built without CUDA");
#endif
  }
  std::string known;
  for (const std::string& n : backend_names()) known += (known.empty() ? "" : ", ") + n;
  throw InputError("unknown backend '" + name + "'; known backends: " + known);
}

}  // namespace voxd
