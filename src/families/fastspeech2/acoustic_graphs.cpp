#include "families/fastspeech2/acoustic_graphs.h"

#include <algorithm>
#include <bit>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/workspace_arena.h"
#include "core/workspace_plan.h"
#include "families/fastspeech2/workspace_steps.h"

namespace voxd {

// Members in the order they must be made; they go in reverse: the graph (waiting for its
// replays) before the tensors, the tensors before their arena.
struct AcousticGraphs::Graph {
  std::unique_ptr<WorkspaceArena> arena;
  // Inputs: the decoder's frame map [B, F] and mel lengths [B] (I64).
  Tensor frame_rows;
  Tensor mel_lengths;
  Tensor mel;  // output: [B, F, n_mels]
  std::unique_ptr<CapturedWork> work;
  uint64_t last_use = 0;

  uint64_t bytes() const { return arena->capacity(); }
};

struct AcousticGraphs::Encoder {
  std::unique_ptr<WorkspaceArena> arena;
  // Inputs (I64): ids [B, T] padded with 0, lengths [B], speakers [B].
  Tensor ids;
  Tensor lengths;
  Tensor speakers;
  // Outputs: hidden [B, T, C] (which the decoders read in place), log durations [B, T].
  Tensor hidden;
  Tensor log_durations;
  std::unique_ptr<CapturedWork> work;
  uint64_t last_use = 0;
  // The decoder graphs that read `hidden`, by frames; declared last, so they go first.
  std::map<int64_t, std::unique_ptr<Graph>> decoders;

  uint64_t bytes() const {
    uint64_t total = arena->capacity();
    for (const auto& [frames, decoder] : decoders) total += decoder->bytes();
    return total;
  }
};

AcousticGraphs::AcousticGraphs(Context& ctx, const FastSpeech2& model, uint64_t max_bytes)
    : ctx_(&ctx), model_(&model), max_bytes_(max_bytes) {}

AcousticGraphs::~AcousticGraphs() = default;

AcousticOutput AcousticGraphs::run(const std::vector<std::vector<int64_t>>& ids,
                                   const std::vector<int64_t>& speakers,
                                   const SynthesisControls& controls,
                                   const std::vector<std::vector<int64_t>>& forced_durations) {
  const FastSpeech2& model = *model_;
  const std::vector<int64_t> lengths = model.check_sequences(ids, speakers, forced_durations);
  const auto batch = static_cast<int64_t>(ids.size());
  const int64_t symbols = padded(*std::max_element(lengths.begin(), lengths.end()));
  SynthesisControls padded = controls;
  padded.mask_padding = true;
  padded.pad_to_phonemes = symbols;
  padded.pad_to_frames = 0;
  const int64_t max_seq_len = model.config().max_seq_len;
  Encoder* encoder =
      enabled() && symbols <= max_seq_len
          ? encoder_for({batch, symbols, std::bit_cast<uint32_t>(controls.pitch_scale)}, padded)
          : nullptr;
  if (encoder == nullptr) {
    // Eagerly, with the padding the graphs would have had.
    const AcousticEncoding encoding =
        model.encode(*ctx_, ids, speakers, padded, nullptr, forced_durations);
    const int64_t longest =
        *std::max_element(encoding.mel_lengths.begin(), encoding.mel_lengths.end());
    padded.pad_to_frames = longest > 0 ? this->padded(longest) : 0;
    return model.decode(*ctx_, encoding, padded);
  }

  Backend& backend = ctx_->backend();
  Context in_encoder(backend, *encoder->arena);
  {
    std::vector<int64_t> padded_ids(static_cast<size_t>(batch * symbols), 0);
    for (size_t b = 0; b < ids.size(); ++b) {
      std::copy(ids[b].begin(), ids[b].end(),
                padded_ids.begin() + static_cast<int64_t>(b) * symbols);
    }
    std::vector<int64_t> speaker_ids = speakers;
    speaker_ids.resize(ids.size(), 0);
    backend.copy(Tensor::from_vector({batch, symbols}, padded_ids), encoder->ids,
                 in_encoder.scratch());
    backend.copy(Tensor::from_vector({batch}, lengths), encoder->lengths, in_encoder.scratch());
    backend.copy(Tensor::from_vector({batch}, speaker_ids), encoder->speakers,
                 in_encoder.scratch());
  }
  encoder->work->replay();
  AcousticEncoding encoding;
  if (forced_durations.empty()) {
    encoding =
        model.durations_from(ops::to_host(in_encoder, encoder->log_durations), lengths, controls);
  } else {
    encoding = FastSpeech2::with_durations(lengths, forced_durations);
  }
  encoding.hidden = encoder->hidden;

  const int64_t longest =
      *std::max_element(encoding.mel_lengths.begin(), encoding.mel_lengths.end());
  const int64_t frames = longest > 0 ? this->padded(longest) : 0;
  Graph* decoder =
      longest > 0 && frames <= max_seq_len ? decoder_for(*encoder, frames, padded) : nullptr;
  if (decoder == nullptr) {
    padded.pad_to_frames = frames;
    return model.decode(*ctx_, encoding, padded);
  }
  Context in_decoder(backend, *decoder->arena);
  backend.copy(Tensor::from_vector({batch, frames}, ops::length_regulation_rows(encoding.durations,
                                                                                symbols, frames)),
               decoder->frame_rows, in_decoder.scratch());
  backend.copy(Tensor::from_vector({batch}, encoding.mel_lengths), decoder->mel_lengths,
               in_decoder.scratch());
  decoder->work->replay();
  AcousticOutput out;
  out.mel = ops::to_device(*ctx_, decoder->mel, decoder->mel.dtype());
  out.mel_lengths = std::move(encoding.mel_lengths);
  out.durations = std::move(encoding.durations);
  return out;
}

AcousticGraphs::Encoder* AcousticGraphs::encoder_for(const EncoderKey& key,
                                                     const SynthesisControls& controls) {
  auto found = encoders_.find(key);
  if (found != encoders_.end()) {
    found->second->last_use = ++uses_;
    return found->second.get();
  }
  const auto [batch, symbols, pitch_bits] = key;
  Backend& backend = ctx_->backend();
  const FastSpeech2& model = *model_;
  const auto inputs = [&](Context& ctx) {
    return std::make_tuple(ops::empty(ctx, {batch, symbols}, DType::I64),
                           ops::empty(ctx, {batch}, DType::I64),
                           ops::empty(ctx, {batch}, DType::I64));
  };
  const ArenaLayout plan = plan_workspace(backend, [&](Context& planning) {
    const auto [ids, lengths, speakers] = inputs(planning);
    (void)model.encode_on_device(planning, ids, lengths, speakers, controls);
  });
  if (!make_room(plan.bytes(), nullptr)) return nullptr;
  auto encoder = std::make_unique<Encoder>();
  encoder->arena = std::make_unique<WorkspaceArena>(ctx_->allocator(), plan);
  Context in_arena(backend, *encoder->arena);
  std::tie(encoder->ids, encoder->lengths, encoder->speakers) = inputs(in_arena);
  encoder->work = backend.capture([&] {
    const DeviceEncoding encoded = model.encode_on_device(in_arena, encoder->ids, encoder->lengths,
                                                          encoder->speakers, controls);
    encoder->hidden = encoded.hidden;
    encoder->log_durations = encoded.log_durations;
  });
  VOXD_CHECK(encoder->work != nullptr, "a backend that can capture recorded nothing");
  encoder->last_use = ++uses_;
  return encoders_.emplace(key, std::move(encoder)).first->second.get();
}

AcousticGraphs::Graph* AcousticGraphs::decoder_for(Encoder& encoder, int64_t frames,
                                                   const SynthesisControls& controls) {
  auto found = encoder.decoders.find(frames);
  if (found != encoder.decoders.end()) {
    found->second->last_use = ++uses_;
    return found->second.get();
  }
  Backend& backend = ctx_->backend();
  const FastSpeech2& model = *model_;
  const int64_t batch = encoder.hidden.size(0);
  const auto inputs = [&](Context& ctx) {
    return std::make_pair(ops::empty(ctx, {batch, frames}, DType::I64),
                          ops::empty(ctx, {batch}, DType::I64));
  };
  const ArenaLayout plan = plan_workspace(backend, [&](Context& planning) {
    const auto [rows, mel_lengths] = inputs(planning);
    (void)model.decode_on_device(planning, encoder.hidden, rows, mel_lengths, controls);
  });
  if (!make_room(plan.bytes(), &encoder)) return nullptr;
  auto decoder = std::make_unique<Graph>();
  decoder->arena = std::make_unique<WorkspaceArena>(ctx_->allocator(), plan);
  Context in_arena(backend, *decoder->arena);
  std::tie(decoder->frame_rows, decoder->mel_lengths) = inputs(in_arena);
  decoder->work = backend.capture([&] {
    decoder->mel = model.decode_on_device(in_arena, encoder.hidden, decoder->frame_rows,
                                          decoder->mel_lengths, controls);
  });
  VOXD_CHECK(decoder->work != nullptr, "a backend that can capture recorded nothing");
  decoder->last_use = ++uses_;
  return encoder.decoders.emplace(frames, std::move(decoder)).first->second.get();
}

bool AcousticGraphs::make_room(uint64_t bytes, const Encoder* keep) {
  if (bytes > max_bytes_) return false;
  while (this->bytes() + bytes > max_bytes_) {
    // The least recently used graph that may go: a decoder, or an encoder without decoders.
    uint64_t oldest = UINT64_MAX;
    auto oldest_encoder = encoders_.end();
    Encoder* owner = nullptr;
    int64_t oldest_decoder = -1;
    for (auto it = encoders_.begin(); it != encoders_.end(); ++it) {
      Encoder& encoder = *it->second;
      for (const auto& [frames, decoder] : encoder.decoders) {
        if (decoder->last_use < oldest) {
          oldest = decoder->last_use;
          owner = &encoder;
          oldest_decoder = frames;
          oldest_encoder = encoders_.end();
        }
      }
      if (&encoder != keep && encoder.decoders.empty() && encoder.last_use < oldest) {
        oldest = encoder.last_use;
        oldest_encoder = it;
        owner = nullptr;
      }
    }
    if (owner != nullptr) {
      owner->decoders.erase(oldest_decoder);
    } else if (oldest_encoder != encoders_.end()) {
      encoders_.erase(oldest_encoder);
    } else {
      return false;
    }
  }
  return true;
}

int64_t AcousticGraphs::padded(int64_t longest) const {
  const int64_t max_seq_len = model_->config().max_seq_len;
  const int64_t length = padded_length(longest);
  return longest <= max_seq_len ? std::min(length, max_seq_len) : length;
}

size_t AcousticGraphs::graphs() const {
  size_t count = 0;
  for (const auto& [key, encoder] : encoders_) count += 1 + encoder->decoders.size();
  return count;
}

uint64_t AcousticGraphs::bytes() const {
  uint64_t total = 0;
  for (const auto& [key, encoder] : encoders_) total += encoder->bytes();
  return total;
}

void AcousticGraphs::clear() {
  encoders_.clear();
}

}  // namespace voxd
