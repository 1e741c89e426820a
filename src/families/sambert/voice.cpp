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
      front_end_(config_.symbols, config_.name) {}

std::unique_ptr<Voice> Voice::load(Context& ctx, VoiceConfig config, DType dtype) {
  Sambert acoustic = Sambert::load(ctx, config.acoustic,
                                   *SafetensorsFile::open(config.acoustic_weights_path), dtype);
  check_tables(config, acoustic);
  KanTtsHifiGan vocoder = KanTtsHifiGan::load(
      ctx, config.vocoder, *SafetensorsFile::open(config.vocoder_weights_path), dtype);
  return std::unique_ptr<Voice>(
      new Voice(std::move(config), std::move(acoustic), std::move(vocoder)));
}

Spoken speak(Context& ctx, const Voice& voice, std::string_view symbols,
             const std::optional<std::string>& emotion, const std::optional<std::string>& speaker,
             const std::function<void(const std::vector<float>&)>& sink) {
  Spoken spoken;
  for (const SambertTokens& tokens : voice.front_end().utterances(symbols, emotion, speaker)) {
    const SambertOutput out = voice.acoustic().synthesize(ctx, tokens);
    const int64_t frames = out.mel.size(0);
    const Tensor mel = ops::transpose(ctx, out.mel.reshape({1, frames, out.mel.size(1)}), 1, 2);
    const std::vector<float> audio =
        ops::to_host(ctx, voice.vocoder().forward(ctx, mel)).to_float_vector();
    sink(audio);
    ++spoken.utterances;
    spoken.frames += frames;
    spoken.samples += static_cast<int64_t>(audio.size());
  }
  return spoken;
}

}  // namespace voxd::sambert
