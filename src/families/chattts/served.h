// What serving a ChatTTS voice holds: the loaded voice with its KV cache in pages (one pool per
// voice, allocated at load with the weights, so it is part of the memory the server holds from
// the start), and each stream's RequestGeneration with the pages its current GPT stage holds.
// The step kinds (gpt_kinds.h, vocode_kind.h) touch them on the device thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/kv_pages.h"
#include "families/chattts/generation.h"
#include "families/chattts/gpt.h"
#include "families/chattts/synthesizer.h"
#include "scheduler/family.h"
#include "scheduler/voice_pool.h"

namespace voxd::chattts {

struct LoadedModels final : scheduler::LoadedVoice {
  std::unique_ptr<Voice> voice;
  PagedKvCache cache;
  std::unique_ptr<KvPagePool> pages;

  int64_t kv_cache_pages() const override { return pages->pages(); }
  uint64_t kv_cache_page_bytes() const override;
};

// A stream's state: its generation, and the pages of the pool its GPT stage holds: those of its
// prefill's positions, one more each time its last is full, all given back when the stage ends,
// the stream ends or is preempted.
class GenerationWork final : public scheduler::StreamWork {
 public:
  explicit GenerationWork(RequestGeneration generation) : generation(std::move(generation)) {}

  RequestGeneration generation;
  std::vector<int64_t> pages;
  KvPagePool* pool = nullptr;    // the pool `pages` are from, once the stream has taken any
  int64_t sentences_paused = 0;  // sentences whose pause has gone out as audio

  // Gives the stage's pages back (when it has ended).
  void release_pages();
  // Gives the pages back mid-stage: the stage will be recomputed (RequestGeneration::preempt).
  void preempt();

  bool finished() const override { return generation.next() == RequestGeneration::Next::kDone; }
  scheduler::StreamGauges gauges() const override;
  void release() override { release_pages(); }
};

LoadedModels& models_of(scheduler::VoiceEntry& entry);
GenerationWork& work_of(scheduler::Stream& stream);
const GenerationWork& work_of(const scheduler::Stream& stream);

// Silence for the sentences `work`'s generation finished since the last call (their pauses), to
// follow the audio already out.
std::vector<float> pauses_since(GenerationWork& work);

}  // namespace voxd::chattts
