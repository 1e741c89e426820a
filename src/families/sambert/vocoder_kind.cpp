#include "families/sambert/vocoder_kind.h"

#include <algorithm>
#include <string>

#include "core/memory_summary.h"
#include "families/sambert/steps.h"

namespace voxd::sambert {
namespace {

using scheduler::Batch;
using scheduler::Stream;
using scheduler::VoiceEntry;

struct Candidate {
  std::shared_ptr<Stream> stream;
  double slack;
  VocoderKind::Chunk chunk;
};

// Rows [from, to) of a buffer of frames [start, ...) of `mels` channels.
std::vector<float> frames_of(const std::vector<float>& buffer, int64_t start, int64_t from,
                             int64_t to, int64_t mels) {
  return {buffer.begin() + (from - start) * mels, buffer.begin() + (to - start) * mels};
}

// Drops the frames of `buffer` (starting at frame `start`) before frame `keep_from`.
void trim(std::vector<float>& buffer, int64_t& start, int64_t keep_from, int64_t mels) {
  if (keep_from <= start) return;
  buffer.erase(buffer.begin(), buffer.begin() + (keep_from - start) * mels);
  start = keep_from;
}

// An NSF utterance's excitation (frames from `start`, `hop` samples each, per harmonic) from
// frame `keep_from` on, before trim moves `start`.
void trim_excitation(std::vector<std::vector<float>>& excitation, int64_t start, int64_t keep_from,
                     int64_t hop) {
  if (keep_from <= start) return;
  for (std::vector<float>& samples : excitation) {
    samples.erase(samples.begin(), samples.begin() + (keep_from - start) * hop);
  }
}

}  // namespace

VocoderKind::Chunk VocoderKind::next_chunk(const Stream& stream) const {
  const SentenceWork& work = work_of(stream);
  Chunk chunk;
  if (work.audio.empty()) return chunk;
  const UtteranceAudio& u = work.audio.front();
  const LoadedModels& models = models_of(*stream.voice);
  const KanTtsHifiGanConfig& vocoder = models.voice->vocoder().config();
  chunk.begin = u.vocoded;
  chunk.frames = u.vocoded == 0 ? u.first_chunk : chunk_frames_;
  chunk.end = std::min(u.vocoded + chunk.frames, u.frames);
  // The postnet's frames up to the vocoder's lookahead past the chunk, and the decoder's its
  // FSMN looks at.
  const int64_t postnet_end = std::min(u.frames, chunk.end + vocoder.lookahead_frames());
  chunk.vocoder_frames =
      postnet_end - std::max<int64_t>(0, chunk.begin - vocoder.left_context_frames());
  const int64_t decoder_end =
      std::min(u.frames, postnet_end + models.voice->acoustic().config().postnet_lookahead());
  chunk.ready = u.decoded >= decoder_end;
  return chunk;
}

Batch VocoderKind::propose(const std::vector<std::shared_ptr<Stream>>& streams,
                           const scheduler::Pacing& pacing, scheduler::Clock::time_point now) {
  std::vector<Candidate> candidates;
  for (const std::shared_ptr<Stream>& stream : streams) {
    if (!stream->running() || work_of(*stream).audio.empty() || !stream->voice->models) continue;
    const Chunk chunk = next_chunk(*stream);
    const int64_t samples = (chunk.end - chunk.begin) * config_of(*stream->voice).hop_length;
    if (!chunk.ready || samples > stream->max_buffered_samples - stream->buffered_samples) {
      continue;
    }
    candidates.push_back({stream, stream->slack(now, pacing.first_audio_due_s), chunk});
  }
  Batch batch = scheduler::lead_by_slack(candidates, pacing, now);
  if (candidates.empty()) return batch;
  // Chunks cut at the lead's size or smaller, padded to it; for a vocoder that looks ahead, whose
  // input cannot be padded, only those with as many frames as the lead's.
  const Chunk& lead = candidates.front().chunk;
  const bool causal = config_of(*batch.voice).vocoder.causal;
  for (const Candidate& c : candidates) {
    if (static_cast<int64_t>(batch.items.size()) >= pacing.max_batch) break;
    if (c.stream->voice == batch.voice && c.chunk.frames <= lead.frames &&
        (causal || c.chunk.vocoder_frames == lead.vocoder_frames)) {
      batch.items.push_back(c.stream);
    }
  }
  return batch;
}

int64_t VocoderKind::vocoder_frames(const VoiceEntry& voice, const Chunk& lead) {
  return vocoder_frames_of(*models_of(voice).voice, lead.frames, lead.vocoder_frames);
}

const ArenaLayout& VocoderKind::plan(const VoiceEntry& voice, int64_t batch, const Chunk& lead) {
  const int64_t vocoder = vocoder_frames(voice, lead);
  return plans_.get(std::make_tuple(&voice, batch, lead.frames, vocoder), [&] {
    return plan_vocode(runtime_.backend(), *models_of(voice).voice, batch, lead.frames, vocoder);
  });
}

uint64_t VocoderKind::footprint(const Batch& batch, size_t size) {
  return scheduler::MemoryBudget::footprint(
      plan(*batch.voice, static_cast<int64_t>(size), next_chunk(*batch.items.front())).bytes());
}

scheduler::StepRefusal VocoderKind::too_big(const Batch& batch, uint64_t footprint,
                                            uint64_t available) const {
  return {.request_too_large = false,
          .code = "insufficient_memory",
          .message = "one vocoder chunk of " +
                     std::to_string(next_chunk(*batch.items.front()).frames) +
                     " mel frames needs " + format_bytes(footprint) +
                     " of device memory, more than the " + format_bytes(available) +
                     " this server has for one step; start it with more memory or smaller "
                     "--chunk-frames"};
}

scheduler::StepOutput VocoderKind::run(const Batch& batch, scheduler::MemoryBudget&) {
  VoiceEntry& voice = *batch.voice;
  const Voice& models = *models_of(voice).voice;
  const Sambert& model = models.acoustic();
  const int64_t mels = model.config().num_mels;
  const int64_t context = model.config().postnet_context();
  const int64_t lookahead = models.vocoder().config().lookahead_frames();
  const int64_t vocoder_context = models.vocoder().config().left_context_frames();
  const int64_t hop = config_of(voice).hop_length;
  const size_t n = batch.items.size();
  const Chunk lead = next_chunk(*batch.items.front());
  std::vector<Chunk> chunks;
  std::vector<ChunkItem> items(n);
  for (size_t i = 0; i < n; ++i) {
    const Stream& stream = *batch.items[i];
    const UtteranceAudio& u = work_of(stream).audio.front();
    const Chunk chunk = next_chunk(stream);
    chunks.push_back(chunk);
    ChunkItem& item = items[i];
    const int64_t p = u.postnet_done;
    const int64_t q = std::min(u.frames, chunk.end + lookahead);
    const int64_t from = std::max<int64_t>(0, p - context);
    const int64_t to = std::min(u.frames, q + model.config().postnet_lookahead());
    item.decoder = frames_of(u.decoder_mel, u.decoder_start, from, to, mels);
    item.offset = from - (p - context);
    item.count = q - p;
    item.h = u.h;
    item.c = u.c;
    const int64_t first = std::max<int64_t>(0, chunk.begin - vocoder_context);
    item.earlier = frames_of(u.postnet_mel, u.postnet_start, first, p, mels);
    item.skip = chunk.begin - first;
    item.keep = chunk.end - chunk.begin;
    if (u.source) {
      item.source = &*u.source;
      item.frame = p;
      item.f0_before = u.f0_done;
      for (const std::vector<float>& samples : u.excitation) {
        item.earlier_excitation.emplace_back(samples.begin() + (first - u.postnet_start) * hop,
                                             samples.begin() + (p - u.postnet_start) * hop);
      }
    }
  }
  run_vocode(runtime_.backend(), runtime_.allocator(), models, items, lead.frames,
             vocoder_frames(voice, lead), plan(voice, static_cast<int64_t>(n), lead));

  scheduler::StepOutput out;
  out.audio.resize(n);
  out.errors.resize(n);
  for (size_t i = 0; i < n; ++i) {
    SentenceWork& work = work_of(*batch.items[i]);
    UtteranceAudio& u = work.audio.front();
    ChunkItem& item = items[i];
    u.postnet_mel.insert(u.postnet_mel.end(), item.postnet.begin(), item.postnet.end());
    u.postnet_done += item.count;
    u.h = std::move(item.h);
    u.c = std::move(item.c);
    if (u.source) {
      const int64_t made = item.count * hop;
      for (size_t h = 0; h < u.excitation.size(); ++h) {
        const auto from = item.excitation.begin() + static_cast<int64_t>(h) * made;
        u.excitation[h].insert(u.excitation[h].end(), from, from + made);
      }
      u.f0_done += f0_sum(config_of(voice), item.postnet.data(), item.count);
    }
    u.vocoded = chunks[i].end;
    trim(u.decoder_mel, u.decoder_start, u.postnet_done - context, mels);
    const int64_t keep_from = u.vocoded - vocoder_context;
    trim_excitation(u.excitation, u.postnet_start, keep_from, hop);
    trim(u.postnet_mel, u.postnet_start, keep_from, mels);
    out.audio[i] = std::move(item.audio);
    if (u.vocoded == u.frames) work.audio.pop_front();
  }
  return out;
}

void VocoderKind::warm_up(VoiceEntry& voice, const scheduler::Pacing&,
                          scheduler::MemoryBudget& budget) {
  // An utterance's first chunk, of chunk_frames.
  const KanTtsHifiGanConfig& vocoder = config_of(voice).vocoder;
  Chunk chunk;
  chunk.frames = chunk_frames_;
  chunk.end = chunk_frames_;
  chunk.vocoder_frames = chunk_frames_ + vocoder.lookahead_frames();
  const ArenaLayout& layout = plan(voice, 1, chunk);
  if (!budget.fits(scheduler::MemoryBudget::footprint(layout.bytes()))) return;
  ChunkItem item;
  item.count = chunk.vocoder_frames;
  item.keep = chunk_frames_;
  std::vector<ChunkItem> items = {item};
  run_vocode(runtime_.backend(), runtime_.allocator(), *models_of(voice).voice, items,
             chunk_frames_, vocoder_frames(voice, chunk), layout);
}

}  // namespace voxd::sambert
