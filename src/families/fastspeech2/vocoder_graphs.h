// Recorded vocoder runs for one mel shape that chunked vocoding repeats: interior chunks all have
// VocoderChunker::max_retained_frames() frames, and a served stream's first chunk, when it does
// not reach its sentence's end, has its first chunk's frames and its right context. For each batch
// size B it meets, a VocoderGraphs plans HifiGan::forward on [B, n_mels, frames]
// (core/workspace_plan.h), takes one arena of that size, places a fixed input and output in it, and
// records the forward pass once with Backend::capture (a CUDA graph). Later runs of that batch size
// copy the mel into the fixed input, replay and copy the audio out: no kernel launches one by one,
// no allocation. Each graph keeps its arena until clear() or destruction (bytes() reports it). On a
// backend that cannot capture (cpu, reference), run() runs the vocoder eagerly and holds nothing.
// One thread at a time, like the backend.
#pragma once

#include <cstdint>
#include <map>
#include <memory>

#include "core/ops.h"
#include "families/fastspeech2/hifigan.h"

namespace voxd {

class VocoderGraphs {
 public:
  // Graphs of `vocoder` for mels of `frames` (≥ 1) frames on ctx's backend, their arenas from
  // ctx's allocator; ctx, its backend and allocator, and the vocoder must outlive this. Throws
  // voxd::InputError for frames < 1.
  VocoderGraphs(Context& ctx, const HifiGan& vocoder, int64_t frames);
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

  // Batch sizes with a recorded graph.
  size_t graphs() const { return graphs_.size(); }
  // Whether batch size `batch` has a recorded graph (its run replays it).
  bool recorded(int64_t batch) const { return graphs_.contains(batch); }
  // Device bytes the recorded graphs hold: their arenas, fixed inputs and outputs included.
  uint64_t bytes() const;
  // Drops every graph and gives its arena back.
  void clear();

 private:
  struct Graph;

  // The graph for `batch`, recorded on first use.
  Graph& graph_for(int64_t batch);

  Context* ctx_;
  const HifiGan* vocoder_;
  int64_t frames_;
  std::map<int64_t, std::unique_ptr<Graph>> graphs_;
};

}  // namespace voxd
