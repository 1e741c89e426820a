#include "core/workspace_plan.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace voxd {

ArenaLayout plan_workspace(Backend& backend, const WorkspaceStep& step) {
  WorkspaceArena arena(backend.device());
  Context ctx = Context::for_planning(backend, arena);
  step(ctx);
  return arena.layout();
}

uint64_t run_in_workspace(Backend& backend, Allocator& upstream, const ArenaLayout& plan,
                          const WorkspaceStep& step) {
  WorkspaceArena arena(upstream, plan);
  Context ctx(backend, arena);
  step(ctx);
  return arena.high_water();
}

uint64_t WorkspacePlan::total_bytes() const {
  uint64_t largest = 0;
  for (const StagePlan& stage : stages) largest = std::max(largest, stage.peak_bytes());
  return weights_bytes + largest;
}

nlohmann::json to_json(const WorkspacePlan& plan) {
  nlohmann::json stages = nlohmann::json::array();
  for (const StagePlan& stage : plan.stages) {
    stages.push_back({{"name", stage.name},
                      {"shape", stage.shape},
                      {"workspace_bytes", stage.workspace_bytes},
                      {"carried_bytes", stage.carried_bytes},
                      {"peak_bytes", stage.peak_bytes()}});
  }
  return {{"device", plan.device},
          {"dtype", plan.dtype},
          {"weights_bytes", plan.weights_bytes},
          {"stages", stages},
          {"total_bytes", plan.total_bytes()}};
}

}  // namespace voxd
