// The steps `voxd serve` runs a Sambert-HiFiGAN voice in, each in one arena planned by shape
// (core/workspace_plan.h) before it runs, so that admission within the memory budget and `voxd
// mem` know what each takes: the encoder (utterances padded to a number of tokens), the decoder's
// prefill (memories padded to a number of steps), one decoder step (a batch of utterances at
// their own steps, over page tables of fixed widths), and a vocoder step (the postnet and the
// vocoder over chunks of up to a number of frames). Planning and running share the code.
#pragma once

#include <cstdint>
#include <vector>

#include "core/kv_pages.h"
#include "core/workspace_plan.h"
#include "families/sambert/voice.h"

namespace voxd::sambert {

// Sambert::encode of `batch` utterances padded to `padded` tokens, masked.
ArenaLayout plan_encode(Backend& backend, const Sambert& model, int64_t batch, int64_t padded);
std::vector<SambertEncoding> run_encode(Backend& backend, Allocator& upstream, const Sambert& model,
                                        const std::vector<const SambertTokens*>& batch,
                                        int64_t padded, const ArenaLayout& plan);

// Sambert::prefill of `batch` memories padded to `padded` steps into `cache` (pages of
// cache.page_size steps, the page table pages_for(padded) wide).
ArenaLayout plan_prefill(Backend& backend, const Sambert& model, PagedKvCache& cache, int64_t batch,
                         int64_t padded);
Tensor run_prefill(Backend& backend, Allocator& upstream, const Sambert& model, PagedKvCache& cache,
                   const std::vector<const SambertMemory*>& batch,
                   const std::vector<const std::vector<int64_t>*>& pages, int64_t padded,
                   const ArenaLayout& plan);

// One decoder step of `batch` utterances with page tables `step_width` and `memory_width` pages
// wide; the frames [B, r · num_mels] come back to the host (F32).
ArenaLayout plan_decode(Backend& backend, const Sambert& model, PagedKvCache& cache, int64_t batch,
                        int64_t step_width, int64_t memory_width);
std::vector<float> run_decode(Backend& backend, Allocator& upstream, const Sambert& model,
                              PagedKvCache& cache, const SambertStepInputs& inputs,
                              const ArenaLayout& plan);

// One item of a vocoder step: the postnet frames [p, p + count) of an utterance from the
// decoder's, then the vocoder over its postnet frames [first, p + count), of which the audio of
// frames [first + skip, first + skip + keep) is kept.
struct ChunkItem {
  // In: decoder frames [p − context, p + count + lookahead) that the utterance has (F32 rows),
  // starting at frame p − context + offset; the postnet LSTM's state after frame p − 1; the
  // postnet frames [first, p) made before.
  std::vector<float> decoder;
  int64_t offset = 0;
  int64_t count = 0;
  std::vector<float> h, c;
  std::vector<float> earlier;
  int64_t skip = 0;
  int64_t keep = 0;
  // NSF voices: the utterance's source, its frame p and the sum of f0 over the frames before
  // it, and the excitation of the earlier postnet frames per harmonic.
  const NsfSource* source = nullptr;
  int64_t frame = 0;
  double f0_before = 0.0;
  std::vector<std::vector<float>> earlier_excitation;
  // Out: the new postnet frames [count, num_mels] (NSF: f0 restored, restore_f0), the LSTM's
  // state after them, NSF: their excitation [harmonics + 1, count · hop], the audio kept.
  std::vector<float> postnet;
  std::vector<float> excitation;
  std::vector<float> audio;
};

// A vocoder step over chunks of at most `frames` frames (count ≤ frames + the vocoder's
// lookahead for each item), the vocoder's input `vocoder_frames` long: each item's postnet frames
// padded on the right, which only a causal vocoder allows; one that looks ahead must be given
// items whose postnet frames are exactly that long (vocoder_frames_of).
ArenaLayout plan_vocode(Backend& backend, const Voice& voice, int64_t batch, int64_t frames,
                        int64_t vocoder_frames);
void run_vocode(Backend& backend, Allocator& upstream, const Voice& voice,
                std::vector<ChunkItem>& items, int64_t frames, int64_t vocoder_frames,
                const ArenaLayout& plan);
// The vocoder input of a step of chunks of `frames`: for a causal vocoder the most any item
// has; for one that looks ahead the item's own, `item_frames`.
int64_t vocoder_frames_of(const Voice& voice, int64_t frames, int64_t item_frames);

}  // namespace voxd::sambert
