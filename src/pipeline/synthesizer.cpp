#include "pipeline/synthesizer.h"

#include <cmath>
#include <cstring>

#include "core/error.h"

namespace voxd {
namespace {

text::FrontEnd make_front_end(const Voice& voice) {
  const VoiceConfig& config = voice.config();
  return text::FrontEnd(text::parse_phoneme_set(config.phonemes),
                        text::SymbolTable::load(config.symbols_path), config.language);
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

}  // namespace

Synthesizer::Synthesizer(Context& ctx, const Voice& voice)
    : ctx_(ctx), voice_(voice), front_end_(make_front_end(voice)) {
  VOXD_CHECK(voice.has_acoustic(), "Synthesizer needs a voice with its acoustic model");
}

Utterance Synthesizer::synthesize_text(std::string_view text, const SynthesisOptions& options,
                                       const AudioSink& sink) const {
  const std::vector<text::Sentence> sentences = front_end_.process(text);
  Utterance out;
  out.sample_rate = voice_.config().sample_rate;
  std::vector<Tensor> mels;
  for (const text::Sentence& sentence : sentences) {
    synthesize_sentence(sentence.ids, options, sink, out, mels);
  }
  if (options.keep_mel) out.mel = concatenate_frames(mels, voice_.config().n_mels, out.mel_frames);
  return out;
}

Utterance Synthesizer::synthesize_ids(const std::vector<int64_t>& ids,
                                      const SynthesisOptions& options,
                                      const AudioSink& sink) const {
  if (ids.empty()) throw InputError("no symbol ids given");
  Utterance out;
  out.sample_rate = voice_.config().sample_rate;
  std::vector<Tensor> mels;
  synthesize_sentence(ids, options, sink, out, mels);
  if (options.keep_mel) out.mel = concatenate_frames(mels, voice_.config().n_mels, out.mel_frames);
  return out;
}

void Synthesizer::synthesize_sentence(const std::vector<int64_t>& ids,
                                      const SynthesisOptions& options, const AudioSink& sink,
                                      Utterance& out, std::vector<Tensor>& mels) const {
  if (!(options.speed > 0.0f)) throw InputError("speed must be positive");
  SynthesisControls controls;
  controls.duration_scale = 1.0f / options.speed;
  controls.pitch_scale = options.pitch;
  controls.energy_scale = options.energy;
  AcousticOutput acoustic = voice_.acoustic().forward(ctx_, {ids}, {options.speaker}, controls);
  const int64_t frames = acoustic.mel_lengths.at(0);
  ++out.sentences;
  if (frames == 0) return;
  // [1, T_max, n_mels] → the sentence's own frames as [1, n_mels, T].
  Tensor mel = ops::transpose(ctx_, acoustic.mel.narrow(1, 0, frames), 1, 2);
  acoustic = AcousticOutput();
  Tensor audio = ops::to_host(ctx_, voice_.vocoder().forward(ctx_, mel));
  sink(audio.data<float>(), static_cast<size_t>(audio.numel()));
  out.samples += audio.numel();
  out.mel_frames += frames;
  if (options.keep_mel) mels.push_back(ops::to_host(ctx_, mel.select(0, 0)));
}

std::vector<float> vocode(Context& ctx, const Voice& voice, const Tensor& mel) {
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
  Tensor device_mel = ops::to_device(ctx, host_mel);
  Tensor audio = ops::to_host(ctx, voice.vocoder().forward(ctx, device_mel));
  return std::vector<float>(audio.data<float>(), audio.data<float>() + audio.numel());
}

}  // namespace voxd
