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

namespace {

// The longest of `ids`' sequences.
int64_t longest_of(const std::vector<std::vector<int64_t>>& ids) {
  size_t longest = 0;
  for (const auto& sequence : ids) longest = std::max(longest, sequence.size());
  return static_cast<int64_t>(longest);
}

// `controls` as the graphs of `symbols` run it: padding masked, the mel frames left to decode.
SynthesisControls padded_controls(const SynthesisControls& controls, int64_t symbols) {
  SynthesisControls padded = controls;
  padded.mask_padding = true;
  padded.pad_to_phonemes = symbols;
  padded.pad_to_frames = 0;
  return padded;
}

// `x`, a graph's output, on the host in F32: downloaded as it is and converted on the host, since
// a converted download would take scratch from the graph's arena, which has only what the
// recorded step needed.
Tensor host_f32(Context& in_arena, const Tensor& x) {
  return ops::to_host(in_arena, x, x.dtype()).to_host_contiguous(DType::F32);
}

}  // namespace

AcousticOutput AcousticGraphs::run(const std::vector<std::vector<int64_t>>& ids,
                                   const std::vector<int64_t>& speakers,
                                   const SynthesisControls& controls,
                                   const std::vector<std::vector<int64_t>>& forced_durations) {
  const Admission any = [](uint64_t) { return true; };
  std::optional<AcousticEncoding> encoding = encode(ids, speakers, controls, any, forced_durations);
  const bool recorded_encoder = encoding.has_value();
  SynthesisControls padded = padded_controls(controls, this->padded(longest_of(ids)));
  if (!recorded_encoder) {
    encoding = model_->encode(*ctx_, ids, speakers, padded, nullptr, forced_durations);
  } else if (std::optional<AcousticOutput> out = decode(*encoding, controls, any)) {
    out->mel = ops::to_device(*ctx_, out->mel, out->mel.dtype());
    return *std::move(out);
  }
  // Eagerly, with the padding the graphs would have had.
  const int64_t longest =
      *std::max_element(encoding->mel_lengths.begin(), encoding->mel_lengths.end());
  padded.pad_to_frames = longest > 0 ? this->padded(longest) : 0;
  return model_->decode(*ctx_, *encoding, padded);
}

std::optional<AcousticEncoding> AcousticGraphs::encode(
    const std::vector<std::vector<int64_t>>& ids, const std::vector<int64_t>& speakers,
    const SynthesisControls& controls, const Admission& admit,
    const std::vector<std::vector<int64_t>>& forced_durations) {
  last_encoder_ = nullptr;
  const FastSpeech2& model = *model_;
  const std::vector<int64_t> lengths = model.check_sequences(ids, speakers, forced_durations);
  const auto batch = static_cast<int64_t>(ids.size());
  const int64_t symbols = padded(*std::max_element(lengths.begin(), lengths.end()));
  if (!enabled() || symbols > model.config().max_seq_len) return std::nullopt;
  Encoder* encoder =
      encoder_for(key_of(batch, symbols, controls), padded_controls(controls, symbols), admit);
  if (encoder == nullptr) return std::nullopt;

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
  AcousticEncoding encoding =
      forced_durations.empty()
          ? model.durations_from(host_f32(in_encoder, encoder->log_durations), lengths, controls)
          : FastSpeech2::with_durations(lengths, forced_durations);
  encoding.hidden = encoder->hidden;
  last_encoder_ = encoder;
  return encoding;
}

std::optional<AcousticOutput> AcousticGraphs::decode(const AcousticEncoding& encoding,
                                                     const SynthesisControls& controls,
                                                     const Admission& admit) {
  Encoder* encoder = last_encoder_;
  VOXD_CHECK(encoder != nullptr && encoding.hidden.raw_data() == encoder->hidden.raw_data(),
             "AcousticGraphs::decode of an encoding that its last encode() did not return");
  const int64_t longest =
      *std::max_element(encoding.mel_lengths.begin(), encoding.mel_lengths.end());
  const int64_t frames = longest > 0 ? padded(longest) : 0;
  if (frames == 0 || frames > model_->config().max_seq_len) return std::nullopt;
  const int64_t batch = encoder->hidden.size(0);
  const int64_t symbols = encoder->hidden.size(1);
  Graph* decoder = decoder_for(*encoder, frames, padded_controls(controls, symbols), admit);
  if (decoder == nullptr) return std::nullopt;

  Backend& backend = ctx_->backend();
  Context in_decoder(backend, *decoder->arena);
  backend.copy(Tensor::from_vector({batch, frames}, ops::length_regulation_rows(encoding.durations,
                                                                                symbols, frames)),
               decoder->frame_rows, in_decoder.scratch());
  backend.copy(Tensor::from_vector({batch}, encoding.mel_lengths), decoder->mel_lengths,
               in_decoder.scratch());
  decoder->work->replay();
  AcousticOutput out;
  out.mel = decoder->mel;
  out.mel_lengths = encoding.mel_lengths;
  out.durations = encoding.durations;
  return out;
}

bool AcousticGraphs::recorded(int64_t batch, int64_t longest,
                              const SynthesisControls& controls) const {
  return enabled() && encoders_.contains(key_of(batch, padded(longest), controls));
}

AcousticGraphs::EncoderKey AcousticGraphs::key_of(int64_t batch, int64_t symbols,
                                                  const SynthesisControls& controls) {
  return {batch, symbols, std::bit_cast<uint32_t>(controls.pitch_scale)};
}

AcousticGraphs::Encoder* AcousticGraphs::encoder_for(const EncoderKey& key,
                                                     const SynthesisControls& controls,
                                                     const Admission& admit) {
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
  if (!make_room(plan.bytes(), nullptr, admit)) return nullptr;
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
                                                   const SynthesisControls& controls,
                                                   const Admission& admit) {
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
  if (!make_room(plan.bytes(), &encoder, admit)) return nullptr;
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

bool AcousticGraphs::make_room(uint64_t bytes, const Encoder* keep, const Admission& admit) {
  if (bytes > max_bytes_) return false;
  // The budget first, so that nothing goes to make room under max_bytes for a graph the budget
  // then refuses.
  while (!admit(bytes)) {
    if (!drop_oldest(keep)) return false;
  }
  while (this->bytes() + bytes > max_bytes_) {
    if (!drop_oldest(keep)) return false;
  }
  return true;
}

bool AcousticGraphs::drop_oldest(const Encoder* keep) {
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
    return true;
  }
  if (oldest_encoder == encoders_.end()) return false;
  if (oldest_encoder->second.get() == last_encoder_) last_encoder_ = nullptr;
  encoders_.erase(oldest_encoder);
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
  last_encoder_ = nullptr;
  encoders_.clear();
}

}  // namespace voxd
