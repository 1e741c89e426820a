// Creates compute backends by name, so tools and the pipeline pick one from a flag or config.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"

namespace voxd {

// "cpu" (threads: 0 = all cores) or "reference" (threads ignored); any other name throws
// voxd::InputError listing the known names.
std::unique_ptr<Backend> make_backend(const std::string& name, int threads = 0);
// Names make_backend accepts.
std::vector<std::string> backend_names();

}  // namespace voxd
