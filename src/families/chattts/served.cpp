#include "families/chattts/served.h"

namespace voxd::chattts {

uint64_t LoadedModels::kv_cache_page_bytes() const {
  uint64_t bytes = 0;
  for (size_t layer = 0; layer < cache.keys.size(); ++layer) {
    bytes += cache.keys[layer].nbytes() + cache.values[layer].nbytes();
  }
  return bytes / static_cast<uint64_t>(cache.pages);
}

void GenerationWork::release_pages() {
  if (pool != nullptr) pool->release(pages);
}

void GenerationWork::preempt() {
  release_pages();
  generation.preempt();
}

scheduler::StreamGauges GenerationWork::gauges() const {
  // Each code frame makes 2 mel frames; the hidden states wait for the vocoder while kVocode.
  const bool vocoding = generation.next() == RequestGeneration::Next::kVocode;
  return {.mel_frames = vocoding ? 2 * generation.frames() : 0,
          .lookahead_frames = 0,
          .largest_unit_frames = 0,
          .pending_units = generation.next() == RequestGeneration::Next::kDone ? 0 : 1,
          .kv_pages = static_cast<int64_t>(pages.size())};
}

LoadedModels& models_of(scheduler::VoiceEntry& entry) {
  return static_cast<LoadedModels&>(*entry.models);
}

GenerationWork& work_of(scheduler::Stream& stream) {
  return static_cast<GenerationWork&>(*stream.work);
}

const GenerationWork& work_of(const scheduler::Stream& stream) {
  return static_cast<const GenerationWork&>(*stream.work);
}

std::vector<float> pauses_since(GenerationWork& work) {
  std::vector<float> silence;
  if (work.generation.sentences_done() > work.sentences_paused) {
    work.sentences_paused = work.generation.sentences_done();
    silence.assign(static_cast<size_t>(work.generation.pause_samples()), 0.0f);
  }
  return silence;
}

}  // namespace voxd::chattts
