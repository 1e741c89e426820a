#include "families/sambert/voice.h"

#include <string>
#include <utility>

#include "core/error.h"
#include "core/safetensors.h"

namespace voxd::sambert {
namespace {

// The symbol lists against the model's tables: each list has a row per table row, or one more
// (ModelScope's checkpoints drop the mask's row, the last).
void check_tables(const VoiceConfig& config, const Sambert& model) {
  const std::array<int64_t, SambertSymbols::kChannels> lists = config.symbols.sizes();
  const std::array<int64_t, 4> linguistic = model.linguistic_vocabulary();
  const std::array<int64_t, SambertSymbols::kChannels> tables = {
      linguistic[0], linguistic[1],      linguistic[2],
      linguistic[3], model.n_emotions(), model.n_speakers()};
  const char* const names[] = {"sy", "tone", "syllable_flag", "word_segment", "emotion", "speaker"};
  for (size_t c = 0; c < SambertSymbols::kChannels; ++c) {
    if (tables[c] != lists[c] && tables[c] != lists[c] - 1) {
      throw InputError(config.acoustic_weights_path + ": the " + names[c] + " table has " +
                       std::to_string(tables[c]) + " rows, the voice's symbol list " +
                       std::to_string(lists[c]) + " entries");
    }
  }
}

}  // namespace

Voice::Voice(VoiceConfig config, Sambert acoustic, KanTtsHifiGan vocoder)
    : config_(std::move(config)),
      acoustic_(std::move(acoustic)),
      vocoder_(std::move(vocoder)),
      front_end_(config_.symbols, config_.name, config_.language) {}

std::unique_ptr<Voice> Voice::load(Context& ctx, VoiceConfig config, DType dtype) {
  Sambert acoustic = Sambert::load(ctx, config.acoustic,
                                   *SafetensorsFile::open(config.acoustic_weights_path), dtype);
  check_tables(config, acoustic);
  KanTtsHifiGan vocoder = KanTtsHifiGan::load(
      ctx, config.vocoder, *SafetensorsFile::open(config.vocoder_weights_path), dtype);
  return std::unique_ptr<Voice>(
      new Voice(std::move(config), std::move(acoustic), std::move(vocoder)));
}

void restore_f0(const VoiceConfig& config, float* frames, int64_t count) {
  const int64_t channels = config.acoustic.num_mels;
  for (int64_t t = 0; t < count; ++t) {
    float* frame = frames + t * channels;
    float& f0 = frame[channels - 2];
    float& voiced = frame[channels - 1];
    voiced = voiced < 0.6f ? 0.0f : 1.0f;
    f0 = static_cast<float>(f0 * config.f0_scale + config.f0_offset);
    if (f0 < 30.0f) f0 = 30.0f;
  }
}

NsfSource nsf_source(const VoiceConfig& config, uint64_t seed, int64_t index) {
  return NsfSource(config.vocoder, seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(index));
}

void mel_columns(const VoiceConfig& config, const float* frames, int64_t count, float* mel,
                 int64_t stride) {
  const int64_t channels = config.acoustic.num_mels;
  for (int64_t f = 0; f < count; ++f) {
    for (int64_t m = 0; m < config.mel_channels(); ++m) {
      mel[m * stride + f] = frames[f * channels + m];
    }
  }
}

std::vector<float> excitation_of(const VoiceConfig& config, const NsfSource& source,
                                 const float* frames, int64_t count, int64_t first,
                                 double f0_before) {
  const int64_t channels = config.acoustic.num_mels;
  std::vector<float> f0(static_cast<size_t>(count));
  std::vector<float> voiced(static_cast<size_t>(count));
  for (int64_t f = 0; f < count; ++f) {
    f0[static_cast<size_t>(f)] = frames[f * channels + channels - 2];
    voiced[static_cast<size_t>(f)] = frames[f * channels + channels - 1];
  }
  return source.excitation(f0.data(), voiced.data(), first, count, f0_before);
}

double f0_sum(const VoiceConfig& config, const float* frames, int64_t count) {
  const int64_t channels = config.acoustic.num_mels;
  double sum = 0.0;
  for (int64_t f = 0; f < count; ++f) sum += frames[f * channels + channels - 2];
  return sum;
}

Spoken speak(Context& ctx, const Voice& voice, const std::vector<SambertTokens>& utterances,
             uint64_t seed, const std::function<void(const std::vector<float>&)>& sink) {
  const VoiceConfig& config = voice.config();
  const int64_t mels = config.mel_channels();
  Spoken spoken;
  for (const SambertTokens& tokens : utterances) {
    const SambertOutput out = voice.acoustic().synthesize(ctx, tokens);
    // An utterance whose every token got 0 frames makes no audio, as served (where it takes no
    // excitation source's index either).
    if (!out.mel.defined()) continue;
    const int64_t frames = out.mel.size(0);
    std::vector<float> post = ops::to_host(ctx, out.mel).to_float_vector();
    Tensor excitation;
    if (config.acoustic.nsf) {
      restore_f0(config, post.data(), frames);
      excitation =
          Tensor::from_vector({1, config.vocoder.nsf->harmonics + 1, frames * config.hop_length},
                              excitation_of(config, nsf_source(config, seed, spoken.utterances),
                                            post.data(), frames, 0, 0.0));
    }
    std::vector<float> mel(static_cast<size_t>(mels * frames));
    mel_columns(config, post.data(), frames, mel.data(), frames);
    const Tensor input =
        ops::to_device(ctx, Tensor::from_vector({1, mels, frames}, mel), voice.acoustic().dtype());
    const std::vector<float> audio =
        ops::to_host(ctx, voice.vocoder().forward(ctx, input, excitation)).to_float_vector();
    sink(audio);
    ++spoken.utterances;
    spoken.frames += frames;
    spoken.samples += static_cast<int64_t>(audio.size());
  }
  return spoken;
}

}  // namespace voxd::sambert
