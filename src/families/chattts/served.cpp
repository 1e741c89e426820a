#include "families/chattts/served.h"

#include <utility>

namespace voxd::chattts {

using Next = RequestGeneration::Next;

uint64_t LoadedModels::kv_cache_page_bytes() const {
  return cache.page_bytes();
}

GenerationWork::GenerationWork(RequestGeneration generation, const VoiceConfig& config)
    : generation(std::move(generation)),
      config_(config),
      frames_to_first_chunk_(
          CodeChunker(config.decoder, config.vocos, kStreamChunkFrames, kFirstStreamChunkFrames)
              .frames_until_chunk()) {}

void GenerationWork::release_pages() {
  if (pool != nullptr) pool->release(pages);
}

void GenerationWork::preempt() {
  release_pages();
  generation.preempt();
}

GenerationWork::SentenceAudio& GenerationWork::current_sentence() {
  if (sentences_.empty() || sentences_.back().ended) {
    sentences_.push_back(
        {CodeChunker(config_.decoder, config_.vocos, kStreamChunkFrames, kFirstStreamChunkFrames)});
  }
  return sentences_.back();
}

void GenerationWork::collect() {
  const std::vector<float> rows = generation.take_hidden_states();
  if (!rows.empty()) current_sentence().chunker.append(rows);
  if (generation.next() == Next::kVocode) generation.vocoded();
  while (generation.sentences_done() > sentences_ended_) {
    SentenceAudio& sentence = current_sentence();
    sentence.chunker.finish();
    sentence.ended = true;
    sentence.pause_samples = generation.pause_samples();
    ++sentences_ended_;
  }
}

const CodeChunk* GenerationWork::next_chunk() {
  if (!next_chunk_ && !sentences_.empty() && sentences_.front().chunker.has_chunk()) {
    next_chunk_ = sentences_.front().chunker.next_chunk();
  }
  return next_chunk_ ? &*next_chunk_ : nullptr;
}

int64_t GenerationWork::frames_before_next_chunk() const {
  if (next_chunk_) return 0;
  if (sentences_.empty()) return frames_to_first_chunk_;
  return sentences_.front().chunker.frames_until_chunk();
}

CodeChunk GenerationWork::take_chunk() {
  VOXD_CHECK(next_chunk() != nullptr, "take_chunk() without a chunk ready");
  CodeChunk chunk = std::move(*next_chunk_);
  next_chunk_.reset();
  return chunk;
}

std::vector<float> GenerationWork::take_finished_pauses() {
  int64_t silence = 0;
  while (!next_chunk_ && !sentences_.empty() && sentences_.front().ended &&
         sentences_.front().chunker.done()) {
    silence += sentences_.front().pause_samples;
    sentences_.pop_front();
  }
  return std::vector<float>(static_cast<size_t>(silence), 0.0f);
}

int64_t GenerationWork::rows_held() const {
  int64_t rows = 0;
  for (const SentenceAudio& sentence : sentences_) rows += sentence.chunker.retained_frames();
  return rows + (next_chunk_ ? next_chunk_->rows : 0);
}

bool GenerationWork::audio_backlogged() const {
  return !sentences_.empty() && rows_held() >= 2 * sentences_.front().chunker.max_retained_frames();
}

bool GenerationWork::finished() const {
  return generation.next() == Next::kDone && sentences_.empty() && !next_chunk_;
}

scheduler::StreamGauges GenerationWork::gauges() const {
  // Each code frame makes 2 mel frames: the hidden states held stand for them.
  return {.mel_frames = 2 * rows_held(),
          .lookahead_frames = 0,
          .largest_unit_frames = 0,
          .pending_units = finished() ? 0 : 1,
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

}  // namespace voxd::chattts
