// Memory known before it runs: a step (one forward of a model at one batch shape) is first run in
// a planning context over a planning WorkspaceArena, which records its activations' and kernel
// scratch's requests and places them all (an ArenaLayout: where each block goes, and the bytes
// that takes); then it runs in one arena of exactly that size that follows the layout, taken
// before the step and given back after it in one piece. WorkspacePlan collects the sizes for the
// steps of a voice (docs/memory.md).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/ops.h"
#include "core/workspace_arena.h"

namespace voxd {

// A step: model code that allocates from, and computes in, the context it is given. Whatever must
// outlive the step has to leave the context's allocator before the function returns (a copy to
// the host, or to another allocator).
using WorkspaceStep = std::function<void(Context& ctx)>;

// Runs `step` in a planning context on `backend` over a fresh planning arena and returns the
// arena's layout: where a running arena places each of the step's blocks, and its size. No kernel
// runs, so this needs no device.
ArenaLayout plan_workspace(Backend& backend, const WorkspaceStep& step);

// Runs `step` on `backend` in an arena following `plan`, of plan.bytes() taken from `upstream`
// and given back when the step returns; returns the arena's high-water mark, which equals
// plan.bytes() when the step runs with the inputs it was planned for. Throws voxd::Error when the
// step needs more than plan.bytes().
uint64_t run_in_workspace(Backend& backend, Allocator& upstream, const ArenaLayout& plan,
                          const WorkspaceStep& step);

// The planned memory of one step of a pipeline.
struct StagePlan {
  std::string name;   // "acoustic encoder", "acoustic decoder", "vocoder"
  std::string shape;  // the batch shape it was planned for, e.g. "batch 4 x 60 phonemes"
  // The step's arena.
  uint64_t workspace_bytes = 0;
  // Device memory outside the arena that the step holds while it runs: results on their way to
  // the next step (the acoustic encoder's hidden states, kept until the decoder is done).
  uint64_t carried_bytes = 0;

  uint64_t peak_bytes() const { return workspace_bytes + carried_bytes; }
  bool operator==(const StagePlan&) const = default;
};

// The device memory a voice needs for given batch shapes: its weights plus, since steps run one
// after another, the largest step.
struct WorkspacePlan {
  std::string device;  // "cpu", "cuda:0"
  std::string dtype;   // "f32", "f16", "bf16"
  uint64_t weights_bytes = 0;
  std::vector<StagePlan> stages;

  // weights_bytes + the largest stage peak.
  uint64_t total_bytes() const;
  bool operator==(const WorkspacePlan&) const = default;
};

// {"device", "dtype", "weights_bytes", "stages": [{"name", "shape", "workspace_bytes",
// "carried_bytes", "peak_bytes"}], "total_bytes"}.
nlohmann::json to_json(const WorkspacePlan& plan);

}  // namespace voxd
