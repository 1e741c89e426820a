#include "families/fastspeech2/sentence_work.h"

#include <algorithm>
#include <string_view>

#include "text/phonemizer.h"

namespace voxd::fastspeech2 {

const MelChunk* SentenceWork::peek_chunk(size_t index) {
  while (ready.size() <= index) {
    while (!chunkers.empty() && chunkers.front().done()) chunkers.pop_front();
    if (chunkers.empty() || !chunkers.front().has_chunk()) return nullptr;
    ready.push_back(chunkers.front().next_chunk());
  }
  return &ready[index];
}

int64_t SentenceWork::held_mel_frames() const {
  int64_t frames = 0;
  for (const VocoderChunker& chunker : chunkers) frames += chunker.retained_frames();
  for (const MelChunk& chunk : ready) frames += chunk.mel.size(1);
  return frames;
}

bool SentenceWork::finished() const {
  return sentences.empty() && ready.empty() &&
         std::all_of(chunkers.begin(), chunkers.end(),
                     [](const VocoderChunker& chunker) { return chunker.done(); });
}

scheduler::StreamGauges SentenceWork::gauges() const {
  return {.mel_frames = held_mel_frames(),
          .lookahead_frames = lookahead_frames,
          .largest_unit_frames = largest_sentence_frames,
          .pending_units = static_cast<int64_t>(sentences.size())};
}

void SentenceWork::release() {
  sentences.clear();
  chunkers.clear();
  ready.clear();
}

std::optional<size_t> first_clause_ids(const text::Sentence& sentence) {
  const std::vector<std::string>& units = sentence.phonemes;
  if (sentence.dropped != 0 || units.size() != sentence.ids.size()) return std::nullopt;
  for (size_t i = kMinClauseUnits - 1; i + kMinClauseUnits < units.size(); ++i) {
    const std::string_view unit = units[i];
    if (unit == "," || unit == ";" || unit == ":" || unit == text::kArpabetPause) return i + 1;
  }
  return std::nullopt;
}

}  // namespace voxd::fastspeech2
