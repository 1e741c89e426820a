#include "families/sambert/served.h"

#include <algorithm>
#include <utility>

namespace voxd::sambert {

const Utterance* SentenceWork::next_to_encode() const {
  for (size_t i = 0; i < std::min<size_t>(2, utterances.size()); ++i) {
    if (utterances[i].stage == Utterance::Stage::kPending) return &utterances[i];
  }
  return nullptr;
}

Utterance* SentenceWork::next_to_encode() {
  return const_cast<Utterance*>(std::as_const(*this).next_to_encode());
}

Utterance* SentenceWork::decoding(bool to_the_end) {
  if (utterances.empty() || utterances.front().stage != Utterance::Stage::kDecoding) return nullptr;
  return to_the_end || held_frames() < decode_ahead ? &utterances.front() : nullptr;
}

int64_t SentenceWork::held_frames() const {
  int64_t held = 0;
  for (const UtteranceAudio& a : audio) held += a.decoded - a.vocoded;
  return held;
}

void SentenceWork::release_pages() {
  if (pool == nullptr || utterances.empty()) return;
  pool->release(utterances.front().memory_pages);
  pool->release(utterances.front().step_pages);
}

scheduler::StreamGauges SentenceWork::gauges() const {
  scheduler::StreamGauges g;
  g.mel_frames = held_frames();
  g.lookahead_frames = decode_ahead;
  for (const UtteranceAudio& a : audio)
    g.largest_unit_frames = std::max(g.largest_unit_frames, a.frames);
  for (const Utterance& u : utterances) {
    if (u.stage == Utterance::Stage::kPending) ++g.pending_units;
    g.kv_pages += static_cast<int64_t>(u.memory_pages.size() + u.step_pages.size());
  }
  return g;
}

void SentenceWork::release() {
  release_pages();
  utterances.clear();
  audio.clear();
}

LoadedModels& models_of(scheduler::VoiceEntry& entry) {
  return static_cast<LoadedModels&>(*entry.models);
}

const LoadedModels& models_of(const scheduler::VoiceEntry& entry) {
  return static_cast<const LoadedModels&>(*entry.models);
}

SentenceWork& work_of(scheduler::Stream& stream) {
  return static_cast<SentenceWork&>(*stream.work);
}

const SentenceWork& work_of(const scheduler::Stream& stream) {
  return static_cast<const SentenceWork&>(*stream.work);
}

}  // namespace voxd::sambert
