#include "families/chattts/decode_graphs.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/kv_pages.h"
#include "core/workspace_plan.h"

namespace voxd::chattts {
namespace {

struct StepInputs {
  Tensor embedded;   // [B, 1, hidden], the stream dtype
  Tensor table;      // [B, width] I64
  Tensor positions;  // [B] I64
};

StepInputs make_inputs(Context& ctx, const Gpt& gpt, int64_t batch, int64_t width) {
  return {ops::empty(ctx, {batch, 1, gpt.config().hidden_size}, gpt.stream_dtype()),
          ops::empty(ctx, {batch, width}, DType::I64), ops::empty(ctx, {batch}, DType::I64)};
}

// What a graph records: the decode step and its outputs in F32.
DecodeGraphs::Output decode_step(Context& ctx, const Gpt& gpt, PagedKvCache& cache,
                                 const StepInputs& in, bool code) {
  const Tensor hidden = gpt.forward(ctx, in.embedded, cache, in.table, in.positions);
  return {code ? gpt.code_logits(ctx, hidden) : gpt.text_logits(ctx, hidden),
          ops::to_device(ctx, hidden, DType::F32)};
}

}  // namespace

// Members in the order they must be made; they go in reverse: the graph before the tensors, the
// tensors before their arena.
struct DecodeGraphs::Graph {
  std::unique_ptr<WorkspaceArena> arena;
  StepInputs inputs;
  Output outputs;  // on the device
  std::unique_ptr<CapturedWork> work;
};

DecodeGraphs::DecodeGraphs(Context& persistent, const Gpt& gpt, PagedKvCache& cache, int64_t width)
    : persistent_(&persistent), gpt_(&gpt), cache_(&cache), width_(width) {
  VOXD_CHECK(width >= 1, "DecodeGraphs: a page table of no pages");
}

DecodeGraphs::~DecodeGraphs() = default;

int64_t DecodeGraphs::padded(int64_t batch) {
  int64_t rows = 1;
  while (rows < batch) rows *= 2;
  return rows;
}

const ArenaLayout& DecodeGraphs::plan(const Key& key) {
  auto at = plans_.find(key);
  if (at != plans_.end()) return at->second;
  const ArenaLayout made = plan_workspace(persistent_->backend(), [&](Context& planning) {
    const StepInputs inputs = make_inputs(planning, *gpt_, key.first, width_);
    (void)decode_step(planning, *gpt_, *cache_, inputs, key.second);
  });
  return plans_.emplace(key, made).first->second;
}

uint64_t DecodeGraphs::bytes_to_record(int64_t batch, bool code) {
  const Key key{padded(batch), code};
  return graphs_.contains(key) ? 0 : plan(key).bytes();
}

DecodeGraphs::Graph& DecodeGraphs::graph_for(const Key& key) {
  auto found = graphs_.find(key);
  if (found != graphs_.end()) return *found->second;
  Backend& backend = persistent_->backend();
  auto graph = std::make_unique<Graph>();
  graph->arena = std::make_unique<WorkspaceArena>(persistent_->allocator(), plan(key));
  Context in_arena(backend, *graph->arena);
  graph->inputs = make_inputs(in_arena, *gpt_, key.first, width_);
  graph->work = backend.capture(
      [&] { graph->outputs = decode_step(in_arena, *gpt_, *cache_, graph->inputs, key.second); });
  VOXD_CHECK(graph->work != nullptr, "a backend that can capture recorded nothing");
  return *graphs_.emplace(key, std::move(graph)).first->second;
}

DecodeGraphs::Output DecodeGraphs::run(Context& ctx, const Tensor& embedded,
                                       const std::vector<const std::vector<int64_t>*>& pages,
                                       const std::vector<int64_t>& positions, bool code,
                                       int64_t graph_batch) {
  const auto batch = static_cast<int64_t>(pages.size());
  VOXD_CHECK(enabled(), "DecodeGraphs::run on a backend that records no graphs");
  if (batch < 1 || static_cast<int64_t>(positions.size()) != batch ||
      embedded.shape() != Shape{batch, 1, gpt_->config().hidden_size}) {
    throw Error("DecodeGraphs::run: embedded " + embedded.shape_string() + " for " +
                std::to_string(batch) + " streams and " + std::to_string(positions.size()) +
                " positions; expected [B, 1, hidden] and one page list and position per stream");
  }
  VOXD_CHECK(graph_batch == 0 || graph_batch >= batch,
             "DecodeGraphs::run: a graph smaller than its batch");
  Graph& graph = graph_for({padded(std::max(batch, graph_batch)), code});
  const int64_t rows = graph.inputs.positions.size(0);
  std::vector<const std::vector<int64_t>*> lists(pages);
  const std::vector<int64_t> none;
  lists.resize(static_cast<size_t>(rows), &none);
  std::vector<int64_t> at(positions);
  at.resize(static_cast<size_t>(rows), 0);
  Backend& backend = ctx.backend();
  Context in_arena(backend, *graph.arena);
  Tensor embedded_rows = graph.inputs.embedded.narrow(0, 0, batch);
  backend.copy(embedded, embedded_rows, in_arena.scratch());
  backend.copy(page_table(lists, width_), graph.inputs.table, in_arena.scratch());
  backend.copy(Tensor::from_vector({rows}, at), graph.inputs.positions, in_arena.scratch());
  graph.work->replay();
  return {graph.outputs.logits.narrow(0, 0, batch), graph.outputs.hidden.narrow(0, 0, batch)};
}

uint64_t DecodeGraphs::bytes() const {
  uint64_t total = 0;
  for (const auto& [key, graph] : graphs_) total += graph->arena->capacity();
  return total;
}

}  // namespace voxd::chattts
