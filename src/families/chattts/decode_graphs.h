// Recorded decode steps of ChatTTS's GPT (CUDA graphs), so that a step is one launch instead of
// hundreds. For each batch size it meets (rounded up to a power of two) and stage (the code
// heads or the text head), a DecodeGraphs plans one decode step over the voice's paged KV cache,
// takes an arena of that size from the persistent context, places the step's inputs in it (the
// embedded tokens, a page table `width` pages wide per stream, each stream's position: every
// one in device memory, where the step's kernels read them when it replays) and records the
// step once with Backend::capture. A step then copies its inputs in and replays; its logits and
// hidden states stay on the device for the caller to draw from and read. Rows past the batch have
// no pages: their keys are dropped and their outputs never read. One thread at a time, like the
// backend.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "core/ops.h"
#include "core/workspace_arena.h"
#include "families/chattts/gpt.h"

namespace voxd::chattts {

class DecodeGraphs {
 public:
  // What one step gives back, on the device (views of the graph's outputs, valid until the next
  // run()): the stage head's logits (F32 [B, 1, num_vq, num_audio_tokens] or
  // [B, 1, num_text_tokens]) and the hidden states (F32 [B, 1, hidden]).
  struct Output {
    Tensor logits;
    Tensor hidden;
  };

  // Graphs of `gpt`'s decode steps over `cache` with tables `width` pages wide, their arenas
  // from `persistent`'s allocator; it, its backend, `gpt` and `cache` must outlive this.
  DecodeGraphs(Context& persistent, const Gpt& gpt, PagedKvCache& cache, int64_t width);
  ~DecodeGraphs();
  DecodeGraphs(const DecodeGraphs&) = delete;
  DecodeGraphs& operator=(const DecodeGraphs&) = delete;

  // Whether the backend records graphs (else run() cannot).
  bool enabled() const { return persistent_->backend().can_capture(); }
  int64_t width() const { return width_; }
  // The batch a step of `batch` streams runs as: the next power of two.
  static int64_t padded(int64_t batch);
  // Device bytes a step of `batch` streams still needs to be recorded: its plan, or 0 once it is.
  uint64_t bytes_to_record(int64_t batch, bool code);
  // One decode step of embedded [B, 1, hidden] (on the device, Gpt::stream_dtype()), stream b
  // at position positions[b] (within the GPT's positions) with pages *pages[b] (at most width()
  // of them), through the graph of a step of `graph_batch` streams (at least B; 0: B): the first
  // run of a shape records it. Throws voxd::Error when the step cannot be recorded.
  Output run(Context& ctx, const Tensor& embedded,
             const std::vector<const std::vector<int64_t>*>& pages,
             const std::vector<int64_t>& positions, bool code, int64_t graph_batch = 0);

  // Device bytes the recorded graphs hold: their arenas, inputs and outputs included.
  uint64_t bytes() const;

 private:
  struct Graph;
  using Key = std::pair<int64_t, bool>;  // padded batch, code stage

  const ArenaLayout& plan(const Key& key);
  Graph& graph_for(const Key& key);

  Context* persistent_;
  const Gpt* gpt_;
  PagedKvCache* cache_;
  int64_t width_;
  std::map<Key, ArenaLayout> plans_;
  std::map<Key, std::unique_ptr<Graph>> graphs_;
};

}  // namespace voxd::chattts
