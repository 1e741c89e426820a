// The FastSpeech2 + HiFiGAN family ("type": "fastspeech2-hifigan", the family of configs that
// name none): eSpeak NG phonemes (of English, or of Mandarin pinyin) → FastSpeech2 (ming024) → mel
// → HiFiGAN (jik876). Its steps are AcousticKind (sentences) and VocoderKind (mel chunks); a
// stream's state is a SentenceWork.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "families/fastspeech2/acoustic_graphs.h"
#include "families/fastspeech2/sentence_work.h"
#include "families/fastspeech2/vocoder_graphs.h"
#include "families/fastspeech2/vocoder_step_times.h"
#include "families/fastspeech2/voice.h"
#include "scheduler/family.h"
#include "scheduler/voice_pool.h"
#include "text/front_end.h"

namespace voxd::fastspeech2 {

// A voice's config and front end (text/mandarin/espeak_front_end.h picks it by language).
class Definition final : public scheduler::VoiceDefinition {
 public:
  explicit Definition(VoiceConfig config);

  const VoiceConfig& config() const { return config_; }
  const scheduler::VoiceCard& card() const override { return card_; }
  const text::FrontEnd& front_end() const override { return *front_end_; }
  // Throws scheduler::OptionError naming the first sampling option `options` sets: this family
  // does not sample.
  scheduler::PreparedStream prepare(std::string_view text, const scheduler::SpeechOptions& options,
                                    const scheduler::SchedulerOptions& scheduling) const override;
  // prepare() of sentences the front end made already (at least one), with options prepare()
  // checked (only speed is read).
  scheduler::PreparedStream prepare_sentences(std::vector<text::Sentence> sentences,
                                              const scheduler::SpeechOptions& options,
                                              const scheduler::SchedulerOptions& scheduling) const;
  std::unique_ptr<scheduler::LoadedVoice> load(
      Context& ctx, DType dtype, const scheduler::SchedulerOptions& scheduling) const override;
  // The acoustic model's two steps for shape.batch sentences of shape.units phonemes (frames:
  // of the longest mel, default 8 per phoneme), and the vocoder for shape.chunks chunks of
  // shape.frames (default: the acoustic batch vocoded whole).
  WorkspacePlan plan_memory(Backend& backend, DType dtype, const scheduler::PlanShape& shape,
                            std::vector<std::string>& notes) const override;
  // One vocoder chunk of scheduling.chunk_frames with its context.
  uint64_t smallest_step_bytes(Backend& backend, const scheduler::LoadedVoice& loaded,
                               const scheduler::SchedulerOptions& scheduling) const override;

 private:
  VoiceConfig config_;
  scheduler::VoiceCard card_;
  std::unique_ptr<const text::FrontEnd> front_end_;
};

// A loaded voice: both models, and the acoustic and vocoder graphs recorded for it (in the
// runtime's persistent context), which go before the models.
struct LoadedModels final : scheduler::LoadedVoice {
  std::unique_ptr<Voice> voice;
  std::unique_ptr<AcousticGraphs> acoustic_graphs;
  // The vocoder's graphs by mel frames (interior chunks' and streams' first chunks'), all over
  // one SharedGraphMemory.
  std::shared_ptr<SharedGraphMemory> vocoder_graph_memory;
  std::map<int64_t, std::unique_ptr<VocoderGraphs>> vocoder_graphs;
  VocoderStepTimes vocoder_times;  // which VocoderKind sizes steps by

  // The acoustic graphs (the vocoder's are kept: an interior chunk's step records its batch
  // rather than running eagerly).
  uint64_t releasable_recording_bytes() const override;
  uint64_t release_recordings() override;
};

class Family final : public scheduler::Family {
 public:
  std::string_view type() const override { return kFastSpeech2HifiGanType; }
  std::unique_ptr<scheduler::VoiceDefinition> read(const std::string& directory) const override;
  // VocoderKind, then AcousticKind: at equal slack, audio from mel already made comes first.
  std::vector<std::unique_ptr<scheduler::StepKind>> make_kinds(
      DeviceRuntime& runtime, const scheduler::SchedulerOptions& scheduling) const override;
};

// The family's parts of an entry or stream of this family (the kinds see no other).
const VoiceConfig& config_of(const scheduler::VoiceEntry& entry);
LoadedModels& models_of(scheduler::VoiceEntry& entry);
const LoadedModels& models_of(const scheduler::VoiceEntry& entry);
SentenceWork& work_of(scheduler::Stream& stream);
const SentenceWork& work_of(const scheduler::Stream& stream);

}  // namespace voxd::fastspeech2
