// The ChatTTS family ("type": "chattts"): WordPiece tokens → the GPT's refine-text and
// audio-code stages → the Decoder → Vocos → 24 kHz audio. `voxd synth` speaks its voices
// (synthesizer.h), `voxd mem` plans them and `voxd voices` / `voxd phonemize` read them; serving
// them needs step kinds with a paged KV cache, which this family does not have yet, so
// `voxd serve` refuses its voices with a message saying so.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "families/chattts/text_front_end.h"
#include "families/chattts/voice_config.h"
#include "scheduler/family.h"

namespace voxd::chattts {

// Positions in a page of the GPT's paged KV cache (vLLM's default block size).
inline constexpr int64_t kKvPageSize = 16;

class Definition final : public scheduler::VoiceDefinition {
 public:
  explicit Definition(VoiceConfig config);

  const VoiceConfig& config() const { return config_; }
  const scheduler::VoiceCard& card() const override { return card_; }
  const text::FrontEnd& front_end() const override { return front_end_; }
  // Refused: not served yet.
  scheduler::PreparedStream prepare(std::string_view text, const scheduler::SpeechOptions& options,
                                    const scheduler::SchedulerOptions& scheduling) const override;
  // Refused: not served yet.
  std::unique_ptr<scheduler::LoadedVoice> load(
      Context& ctx, DType dtype, const scheduler::SchedulerOptions& scheduling) const override;
  // The GPT's prefill of shape.batch prompts of shape.units tokens with the heads on the last
  // position, one decode step of the batch's streams over full caches with both heads (the KV
  // cache carried: pages of kKvPageSize for each stream's prompt plus the code stage's
  // max_new_token, within the GPT's positions), and the Decoder + Vocos over shape.frames mel
  // frames (default: 2 per token).
  WorkspacePlan plan_memory(Backend& backend, DType dtype, const scheduler::PlanShape& shape,
                            std::vector<std::string>& notes) const override;
  uint64_t smallest_step_bytes(Backend& backend, const scheduler::LoadedVoice& loaded,
                               const scheduler::SchedulerOptions& scheduling) const override;

 private:
  VoiceConfig config_;
  scheduler::VoiceCard card_;
  TextFrontEnd front_end_;
};

class Family final : public scheduler::Family {
 public:
  std::string_view type() const override { return kChatTtsType; }
  std::unique_ptr<scheduler::VoiceDefinition> read(const std::string& directory) const override;
  // Refused: not served yet.
  std::vector<std::unique_ptr<scheduler::StepKind>> make_kinds(
      DeviceRuntime& runtime, const scheduler::SchedulerOptions& scheduling) const override;
};

}  // namespace voxd::chattts
