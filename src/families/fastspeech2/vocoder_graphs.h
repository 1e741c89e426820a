// Recorded vocoder runs for one mel shape that chunked vocoding repeats: interior chunks all have
// VocoderChunker::max_retained_frames() frames, and a served stream's first chunk, when it does
// not reach its sentence's end, has its first chunk's frames and its right context. For each batch
// size B it meets, a VocoderGraphs plans HifiGan::forward on [B, n_mels, frames]
// (core/workspace_plan.h), takes one arena of that size, places a fixed input and output in it, and
// records the forward pass once with Backend::capture (a CUDA graph). Later runs of that batch size
// copy the mel into the fixed input, replay and copy the audio out: no kernel launches one by one,
// no allocation. Each graph keeps its arena until clear() or destruction; the arenas of all batch
// sizes, and of other VocoderGraphs given the same SharedGraphMemory, lie over one block (bytes()
// reports it). On a backend that cannot capture (cpu, reference), run() runs the vocoder eagerly
// and holds nothing. One thread at a time, like the backend.
#pragma once

#include <cstdint>
#include <map>
#include <memory>

#include "core/allocator.h"
#include "core/ops.h"
#include "core/workspace_arena.h"
#include "families/fastspeech2/hifigan.h"

namespace voxd {

// Device memory that a vocoder's graphs share, as the upstream of each graph's arena. Graphs
// replay one at a time on the backend's one stream, and no replay's values outlive it (its input
// is copied in before it, its audio copied out after it), so every arena lies over the same
// block: allocate() returns the largest block for any size it holds, and takes a larger one from
// `upstream` otherwise (arenas placed before keep the smaller one). A block goes back when the
// last arena over it does, and new arenas then go over the largest left. Memory is the largest
// graph's, not the sum of all, where the largest is placed first. One thread.
class SharedGraphMemory final : public Allocator {
 public:
  // `upstream` must outlive this, and this every arena over it.
  explicit SharedGraphMemory(Allocator& upstream) : upstream_(&upstream) {}
  SharedGraphMemory(const SharedGraphMemory&) = delete;
  SharedGraphMemory& operator=(const SharedGraphMemory&) = delete;

  // The largest block held when it holds `bytes`, else a new one of `bytes` from upstream.
  void* allocate(size_t bytes) override;
  // One arena fewer over the block at `ptr`; the block goes back after its last.
  void deallocate(void* ptr, size_t bytes) override;
  Device device() const override { return upstream_->device(); }
  // allocated and reserved: the bytes of the blocks held from upstream.
  AllocatorStats stats() const override;
  // The bytes an arena of `bytes` would take from upstream: 0 where the largest block holds it.
  uint64_t bytes_to_place(uint64_t bytes) const;
  // Whether a replay over this memory is started and its audio not yet read
  // (VocoderGraphs::start to finish): another replay would write over its output.
  bool replaying() const { return replaying_; }
  void set_replaying(bool replaying) { replaying_ = replaying; }

 private:
  struct Block {
    size_t bytes;
    size_t arenas;
  };
  // The largest block held, where new arenas go; null when none is.
  void* largest() const;

  Allocator* upstream_;
  std::map<void*, Block> blocks_;
  AllocatorStats stats_;
  bool replaying_ = false;
};

class VocoderGraphs {
 public:
  // Graphs of `vocoder` for mels of `frames` (≥ 1) frames on ctx's backend, their arenas over
  // `memory` (shared with other VocoderGraphs of the same vocoder that run on the same thread),
  // or over memory of their own from ctx's allocator when null; ctx, its backend and allocator,
  // and the vocoder must outlive this. Throws voxd::InputError for frames < 1.
  VocoderGraphs(Context& ctx, const HifiGan& vocoder, int64_t frames,
                std::shared_ptr<SharedGraphMemory> memory = nullptr);
  // Waits for replays still running, then gives every arena back.
  ~VocoderGraphs();
  VocoderGraphs(const VocoderGraphs&) = delete;
  VocoderGraphs& operator=(const VocoderGraphs&) = delete;

  // Whether the backend records graphs; when false, run() is the eager forward pass.
  bool enabled() const { return ctx_->backend().can_capture(); }
  // The mel frame count the graphs are for.
  int64_t frames() const { return frames_; }
  // Host mel [B, n_mels, frames()] (any float dtype) -> host F32 audio [B, output_length]. The
  // first run of a batch size plans, allocates and records its graph (and computes through it);
  // later ones replay it. The result is a new host tensor, the caller's to keep. Throws
  // voxd::InputError for another shape, voxd::Error when the forward pass cannot be recorded.
  Tensor run(const Tensor& mel);
  // run() in two halves, so that the host may do other work while the device replays: start()
  // checks and copies the mel in and queues the replay (recording the graph first where it is
  // new; on a backend that cannot record it runs the forward pass whole), and finish() waits for
  // it and returns the audio. Between the two, no other VocoderGraphs over the same memory
  // starts or runs (voxd::Error), and no clear().
  void start(const Tensor& mel);
  Tensor finish();

  // Batch sizes with a recorded graph.
  size_t graphs() const { return graphs_.size(); }
  // Whether batch size `batch` has a recorded graph (its run replays it).
  bool recorded(int64_t batch) const { return graphs_.contains(batch); }
  // The smallest recorded batch size of at least `batch`; 0 when none is.
  int64_t recorded_holding(int64_t batch) const;
  // Device bytes recording batch size `batch` would take: 0 where it is recorded or its arena
  // fits the memory the graphs share, else its plan's bytes.
  uint64_t bytes_to_record(int64_t batch);
  // Device bytes the graphs' memory holds (shared with the other VocoderGraphs over it): their
  // arenas, fixed inputs and outputs included.
  uint64_t bytes() const;
  // Drops every graph and gives its arena back.
  void clear();

 private:
  struct Graph;

  // The arena layout of batch size `batch`'s graph, planned once.
  const ArenaLayout& plan(int64_t batch);
  // The graph for `batch`, recorded on first use.
  Graph& graph_for(int64_t batch);

  Context* ctx_;
  const HifiGan* vocoder_;
  int64_t frames_;
  std::shared_ptr<SharedGraphMemory> memory_;  // before graphs_: their arenas lie over it
  std::map<int64_t, ArenaLayout> plans_;
  std::map<int64_t, std::unique_ptr<Graph>> graphs_;
  // Between start() and finish(): the graph replaying, or the eager pass's audio.
  Graph* replaying_ = nullptr;
  Tensor eager_audio_;
  bool started_ = false;
};

}  // namespace voxd
