#include "families/fastspeech2/vocoder_graphs.h"

#include <string>
#include <utility>

#include "core/error.h"
#include "core/workspace_arena.h"
#include "core/workspace_plan.h"

namespace voxd {
namespace {

// What a graph records: the forward pass on `input`, its audio as a contiguous F32 tensor.
Tensor forward_f32(Context& ctx, const HifiGan& vocoder, const Tensor& input) {
  Tensor audio = vocoder.forward(ctx, input);
  if (audio.dtype() != DType::F32) audio = ops::to_device(ctx, audio, DType::F32);
  return ops::contiguous(ctx, audio);
}

}  // namespace

void* SharedGraphMemory::largest() const {
  void* largest = nullptr;
  size_t most = 0;
  for (const auto& [block, held] : blocks_) {
    if (held.bytes > most) {
      largest = block;
      most = held.bytes;
    }
  }
  return largest;
}

void* SharedGraphMemory::allocate(size_t bytes) {
  if (void* block = largest(); block != nullptr && blocks_.at(block).bytes >= bytes) {
    ++blocks_.at(block).arenas;
    return block;
  }
  void* block = upstream_->allocate(bytes);
  blocks_.emplace(block, Block{bytes, 1});
  stats_.count_block(bytes);
  return block;
}

void SharedGraphMemory::deallocate(void* ptr, size_t /*bytes*/) {
  const auto found = blocks_.find(ptr);
  VOXD_CHECK(found != blocks_.end(), "SharedGraphMemory: a block it did not give");
  if (--found->second.arenas > 0) return;
  const size_t bytes = found->second.bytes;
  upstream_->deallocate(ptr, bytes);
  blocks_.erase(found);
  stats_.count_block_freed(bytes);
}

AllocatorStats SharedGraphMemory::stats() const {
  return stats_;
}

uint64_t SharedGraphMemory::bytes_to_place(uint64_t bytes) const {
  void* block = largest();
  return block != nullptr && blocks_.at(block).bytes >= bytes ? 0 : bytes;
}

// Members in the order they must be made; they go in reverse: the graph (waiting for its
// replays) before the tensors, the tensors before their arena.
struct VocoderGraphs::Graph {
  std::unique_ptr<WorkspaceArena> arena;
  Tensor input;   // [B, n_mels, frames] in the vocoder's dtype
  Tensor output;  // [B, output_length(frames)] F32
  std::unique_ptr<CapturedWork> work;
};

VocoderGraphs::VocoderGraphs(Context& ctx, const HifiGan& vocoder, int64_t frames,
                             std::shared_ptr<SharedGraphMemory> memory)
    : ctx_(&ctx), vocoder_(&vocoder), frames_(frames), memory_(std::move(memory)) {
  if (frames < 1) {
    throw InputError("VocoderGraphs: frames must be at least 1 mel frame, got " +
                     std::to_string(frames));
  }
  if (!memory_) memory_ = std::make_shared<SharedGraphMemory>(ctx.allocator());
}

VocoderGraphs::~VocoderGraphs() {
  if (replaying_ != nullptr) memory_->set_replaying(false);
}

Tensor VocoderGraphs::run(const Tensor& mel) {
  start(mel);
  return finish();
}

void VocoderGraphs::start(const Tensor& mel) {
  const int64_t n_mels = vocoder_->config().num_mels;
  if (!mel.defined() || mel.dim() != 3 || mel.size(0) < 1 || mel.size(1) != n_mels ||
      mel.size(2) != frames_ || !mel.device().is_cpu() || !is_floating(mel.dtype())) {
    throw InputError("VocoderGraphs: mel " + mel.shape_string() +
                     " must be a float host tensor [B, " + std::to_string(n_mels) + ", " +
                     std::to_string(frames_) + "] with B >= 1 (the shape the graphs are for)");
  }
  VOXD_CHECK(!started_ && !memory_->replaying(),
             "VocoderGraphs: a replay started before the last one's audio was read");
  Context& ctx = *ctx_;
  if (!enabled()) {
    eager_audio_ = ops::to_host(
        ctx, vocoder_->forward(ctx, ops::to_device(ctx, mel, vocoder_->dtype())), DType::F32);
    started_ = true;
    return;
  }
  Graph& graph = graph_for(mel.size(0));
  Context in_arena(ctx.backend(), *graph.arena);
  ctx.backend().copy(mel, graph.input, in_arena.scratch());
  graph.work->replay();
  replaying_ = &graph;
  started_ = true;
  memory_->set_replaying(true);
}

Tensor VocoderGraphs::finish() {
  VOXD_CHECK(started_, "VocoderGraphs::finish without start");
  started_ = false;
  if (replaying_ == nullptr) return std::move(eager_audio_);
  Graph& graph = *replaying_;
  replaying_ = nullptr;
  memory_->set_replaying(false);
  Context in_arena(ctx_->backend(), *graph.arena);
  return ops::to_host(in_arena, graph.output, DType::F32);
}

int64_t VocoderGraphs::recorded_holding(int64_t batch) const {
  const auto found = graphs_.lower_bound(batch);
  return found != graphs_.end() ? found->first : 0;
}

uint64_t VocoderGraphs::bytes_to_record(int64_t batch) {
  if (!enabled() || recorded(batch)) return 0;
  return memory_->bytes_to_place(plan(batch).bytes());
}

uint64_t VocoderGraphs::bytes() const {
  return memory_->stats().allocated_bytes;
}

void VocoderGraphs::clear() {
  VOXD_CHECK(!started_, "VocoderGraphs::clear between start and finish");
  graphs_.clear();
}

const ArenaLayout& VocoderGraphs::plan(int64_t batch) {
  const auto found = plans_.find(batch);
  if (found != plans_.end()) return found->second;
  const Shape shape{batch, vocoder_->config().num_mels, frames_};
  const ArenaLayout layout = plan_workspace(ctx_->backend(), [&](Context& planning) {
    const Tensor input = ops::empty(planning, shape, vocoder_->dtype());
    forward_f32(planning, *vocoder_, input);
  });
  return plans_.emplace(batch, layout).first->second;
}

VocoderGraphs::Graph& VocoderGraphs::graph_for(int64_t batch) {
  auto found = graphs_.find(batch);
  if (found != graphs_.end()) return *found->second;
  Backend& backend = ctx_->backend();
  const Shape shape{batch, vocoder_->config().num_mels, frames_};
  const DType dtype = vocoder_->dtype();
  auto graph = std::make_unique<Graph>();
  graph->arena = std::make_unique<WorkspaceArena>(*memory_, plan(batch));
  Context in_arena(backend, *graph->arena);
  graph->input = ops::empty(in_arena, shape, dtype);
  graph->work =
      backend.capture([&] { graph->output = forward_f32(in_arena, *vocoder_, graph->input); });
  VOXD_CHECK(graph->work != nullptr, "a backend that can capture recorded nothing");
  return *graphs_.emplace(batch, std::move(graph)).first->second;
}

}  // namespace voxd
