#include "families/fastspeech2/synthesizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "families/fastspeech2/vocoder_chunker.h"
#include "families/fastspeech2/vocoder_graphs.h"
#include "text/mandarin/espeak_front_end.h"

namespace voxd {
namespace {

std::unique_ptr<const text::FrontEnd> make_front_end(const Voice& voice) {
  const VoiceConfig& config = voice.config();
  return text::mandarin::make_phoneme_front_end(text::parse_phoneme_set(config.phonemes),
                                                text::SymbolTable::load(config.symbols_path),
                                                config.language, config.name);
}

// [n_mels, T] host tensors concatenated along time.
Tensor concatenate_frames(const std::vector<Tensor>& mels, int64_t n_mels, int64_t frames) {
  Tensor out = Tensor::empty({n_mels, frames}, DType::F32);
  int64_t offset = 0;
  for (const Tensor& mel : mels) {
    const int64_t t = mel.size(1);
    for (int64_t c = 0; c < n_mels; ++c) {
      std::memcpy(out.data<float>() + c * frames + offset, mel.data<float>() + c * t,
                  static_cast<size_t>(t) * sizeof(float));
    }
    offset += t;
  }
  return out;
}

void check_chunk_frames(int64_t chunk_frames) {
  if (chunk_frames < 0) {
    throw InputError(
        "chunk_frames must be 0 (vocode each sentence at once) or a positive number "
        "of mel frames per vocoder chunk, got " +
        std::to_string(chunk_frames));
  }
}

void check_options(const SynthesisOptions& options) {
  if (!(options.speed > 0.0f)) throw InputError("speed must be positive");
  check_chunk_frames(options.chunk_frames);
}

// Vocodes host mel [n_mels, T] (T ≥ 1) through a VocoderChunker, one chunk per vocoder run,
// handing each chunk's audio to `sink` as it is made; returns the number of samples. Interior
// chunks run through `graphs` when given.
int64_t vocode_in_chunks(Context& ctx, const HifiGan& vocoder, const Tensor& mel,
                         int64_t chunk_frames, const AudioSink& sink,
                         VocoderGraphs* graphs = nullptr) {
  VocoderChunker chunker(vocoder.config(), chunk_frames);
  const int64_t frames = mel.size(1);
  int64_t samples = 0;
  for (int64_t offset = 0; offset < frames; offset += chunk_frames) {
    chunker.append(mel.narrow(1, offset, std::min(chunk_frames, frames - offset)));
    if (offset + chunk_frames >= frames) chunker.finish();
    while (chunker.has_chunk()) {
      const std::vector<float> audio =
          vocode_chunks(ctx, vocoder, {chunker.next_chunk()}, graphs).at(0);
      sink(audio.data(), audio.size());
      samples += static_cast<int64_t>(audio.size());
    }
  }
  return samples;
}

// Hands `milliseconds` of silence to `sink`; returns the number of samples.
int64_t emit_silence(int milliseconds, int64_t sample_rate, const AudioSink& sink) {
  static constexpr size_t kBlock = 4096;
  static const std::vector<float> zeros(kBlock, 0.0f);
  const auto samples = static_cast<int64_t>(
      std::llround(static_cast<double>(milliseconds) * static_cast<double>(sample_rate) / 1000.0));
  for (int64_t left = samples; left > 0; left -= static_cast<int64_t>(kBlock)) {
    sink(zeros.data(), static_cast<size_t>(std::min<int64_t>(left, kBlock)));
  }
  return samples;
}

}  // namespace

Synthesizer::Synthesizer(Context& ctx, const Voice& voice)
    : ctx_(ctx), voice_(voice), front_end_(make_front_end(voice)) {
  VOXD_CHECK(voice.has_acoustic(), "Synthesizer needs a voice with its acoustic model");
}

Synthesizer::~Synthesizer() = default;

uint64_t Synthesizer::graph_bytes() const {
  return graphs_ ? graphs_->bytes() : 0;
}

VocoderGraphs* Synthesizer::vocoder_graphs(const SynthesisOptions& options) const {
  if (!options.use_cuda_graphs || options.chunk_frames < 1 || !ctx_.backend().can_capture()) {
    return nullptr;
  }
  const HifiGan& vocoder = voice_.vocoder();
  const int64_t interior = options.chunk_frames + 2 * vocoder.config().receptive_field_frames();
  if (!graphs_ || graphs_->frames() != interior) {
    graphs_ = std::make_unique<VocoderGraphs>(ctx_, vocoder, interior);
  }
  return graphs_.get();
}

Utterance Synthesizer::synthesize_text(std::string_view text, const SynthesisOptions& options,
                                       const AudioSink& sink) const {
  check_options(options);
  const std::vector<text::Sentence> sentences = front_end_->process(text);
  Utterance out;
  out.sample_rate = voice_.config().sample_rate;
  std::vector<Tensor> mels;
  for (const text::Sentence& sentence : sentences) {
    synthesize_sentence(sentence.ids, options, sentence.rate, sink, out, mels);
    if (sentence.pause_after_ms > 0) {
      out.samples += emit_silence(sentence.pause_after_ms, out.sample_rate, sink);
    }
    if (options.on_sentence) options.on_sentence(out, static_cast<int64_t>(sentences.size()));
  }
  if (options.keep_mel) out.mel = concatenate_frames(mels, voice_.config().n_mels, out.mel_frames);
  return out;
}

Utterance Synthesizer::synthesize_ids(const std::vector<int64_t>& ids,
                                      const SynthesisOptions& options,
                                      const AudioSink& sink) const {
  if (ids.empty()) throw InputError("no symbol ids given");
  check_options(options);
  Utterance out;
  out.sample_rate = voice_.config().sample_rate;
  std::vector<Tensor> mels;
  synthesize_sentence(ids, options, 1.0f, sink, out, mels);
  if (options.keep_mel) out.mel = concatenate_frames(mels, voice_.config().n_mels, out.mel_frames);
  return out;
}

void Synthesizer::synthesize_sentence(const std::vector<int64_t>& ids,
                                      const SynthesisOptions& options, float rate,
                                      const AudioSink& sink, Utterance& out,
                                      std::vector<Tensor>& mels) const {
  SynthesisControls controls;
  controls.duration_scale = 1.0f / (options.speed * rate);
  controls.pitch_scale = options.pitch;
  controls.energy_scale = options.energy;
  AcousticOutput acoustic = voice_.acoustic().forward(ctx_, {ids}, {options.speaker}, controls);
  const int64_t frames = acoustic.mel_lengths.at(0);
  ++out.sentences;
  if (frames == 0) return;
  // [1, T_max, n_mels] → the sentence's own frames as [1, n_mels, T].
  Tensor mel = ops::transpose(ctx_, acoustic.mel.narrow(1, 0, frames), 1, 2);
  acoustic = AcousticOutput();
  Tensor host_mel;  // [n_mels, T]
  if (options.keep_mel || options.chunk_frames > 0) host_mel = ops::to_host(ctx_, mel.select(0, 0));
  if (options.chunk_frames > 0) {
    mel = Tensor();
    out.samples += vocode_in_chunks(ctx_, voice_.vocoder(), host_mel, options.chunk_frames, sink,
                                    vocoder_graphs(options));
  } else {
    Tensor audio = ops::to_host(ctx_, voice_.vocoder().forward(ctx_, mel));
    sink(audio.data<float>(), static_cast<size_t>(audio.numel()));
    out.samples += audio.numel();
  }
  out.mel_frames += frames;
  if (options.keep_mel) mels.push_back(host_mel);
}

std::vector<float> vocode(Context& ctx, const Voice& voice, const Tensor& mel,
                          int64_t chunk_frames) {
  check_chunk_frames(chunk_frames);
  const int64_t n_mels = voice.config().n_mels;
  Tensor batched = mel.dim() == 2 ? mel.unsqueeze(0) : mel;
  if (batched.dim() != 3 || batched.size(0) != 1 || batched.size(1) != n_mels ||
      batched.size(2) < 1) {
    throw InputError("mel has shape " + mel.shape_string() + ", expected [" +
                     std::to_string(n_mels) + ", T] or [1, " + std::to_string(n_mels) +
                     ", T] with T >= 1");
  }
  Tensor host_mel = batched.to_host_contiguous(DType::F32);
  const float* values = host_mel.data<float>();
  for (int64_t i = 0; i < host_mel.numel(); ++i) {
    if (!std::isfinite(values[i])) {
      throw InputError("mel has a non-finite value (" + std::to_string(values[i]) +
                       ") at flat index " + std::to_string(i));
    }
  }
  if (chunk_frames > 0) {
    std::vector<float> audio;
    const AudioSink collect = [&audio](const float* samples, size_t count) {
      audio.insert(audio.end(), samples, samples + count);
    };
    vocode_in_chunks(ctx, voice.vocoder(), host_mel.select(0, 0), chunk_frames, collect);
    return audio;
  }
  Tensor device_mel = ops::to_device(ctx, host_mel);
  Tensor audio = ops::to_host(ctx, voice.vocoder().forward(ctx, device_mel));
  return std::vector<float>(audio.data<float>(), audio.data<float>() + audio.numel());
}

}  // namespace voxd
