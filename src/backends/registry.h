// Creates compute backends by name, so tools and the pipeline pick one from a flag or config.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"

namespace voxd {

// "cpu" (threads: 0 = all cores), "reference", or "cuda" / "cuda:N" (device N; threads ignored
// by all but cpu, priority by all but cuda). A CUDA name throws voxd::InputError when voxd was
// built without CUDA or the device is missing; any other name throws voxd::InputError listing the
// known names.
std::unique_ptr<Backend> make_backend(const std::string& name, int threads = 0,
                                      QueuePriority priority = QueuePriority::kNormal);
// Names make_backend accepts.
std::vector<std::string> backend_names();

}  // namespace voxd
