// The Sambert-HiFiGAN family ("type": "sambert"): Chinese text or KAN-TTS symbol strings → Sambert
// (KAN-TTS's acoustic model) → KAN-TTS's HiFiGAN → audio at the voice's rate, for voices converted
// from ModelScope's model folders (tools/convert_checkpoint.py --kantts). `voxd synth` speaks them
// an utterance at a time (voice.h); `voxd serve` runs their utterances' steps batched across
// streams (served.h: encoder, prefill and decoder steps over a paged KV cache, then the postnet and
// the vocoder in chunks); `voxd mem` plans them.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "families/sambert/front_end.h"
#include "families/sambert/voice_config.h"
#include "scheduler/family.h"

namespace voxd::sambert {

class Definition final : public scheduler::VoiceDefinition {
 public:
  explicit Definition(VoiceConfig config);
  Definition(const Definition&) = delete;
  Definition& operator=(const Definition&) = delete;

  const VoiceConfig& config() const { return config_; }
  const scheduler::VoiceCard& card() const override { return card_; }
  const text::FrontEnd& front_end() const override { return front_end_; }
  // The utterances of KAN-TTS symbols (options.input_format kKanTtsSymbols) or of Chinese text
  // (kText, read by the Mandarin front end), with the request's emotion and speaker (and for an
  // NSF voice its seed: the source's phases and noise, 0 when unset). OptionError for speed, the
  // sampling options, and an emotion or speaker the voice does not have (naming the valid
  // ones); InputError for symbols or text the voice cannot read or an utterance of too many
  // tokens.
  scheduler::PreparedStream prepare(std::string_view text, const scheduler::SpeechOptions& options,
                                    const scheduler::SchedulerOptions& scheduling) const override;
  // The models, the Mandarin front end (zh-cn voices), and the KV pool of the decoder:
  // scheduling.kv_cache_bytes of pages, or by default pages for max_batch utterances of 2,000
  // frames (and at least one of the longest allowed).
  std::unique_ptr<scheduler::LoadedVoice> load(
      Context& ctx, DType dtype, const scheduler::SchedulerOptions& scheduling) const override;
  // The steps for shape.batch utterances of shape.units tokens (frames: of each utterance,
  // default 8 per token) and a vocoder step of shape.chunks chunks (default: the batch) of the
  // server's default chunk size, with the KV pool for the batch carried.
  WorkspacePlan plan_memory(Backend& backend, DType dtype, const scheduler::PlanShape& shape,
                            std::vector<std::string>& notes) const override;
  // One vocoder chunk of scheduling.chunk_frames.
  uint64_t smallest_step_bytes(Backend& backend, const scheduler::LoadedVoice& loaded,
                               const scheduler::SchedulerOptions& scheduling) const override;

 private:
  VoiceConfig config_;
  scheduler::VoiceCard card_;
  SymbolFrontEnd front_end_;
};

class Family final : public scheduler::Family {
 public:
  std::string_view type() const override { return kSambertType; }
  std::unique_ptr<scheduler::VoiceDefinition> read(const std::string& directory) const override;
  // The vocoder, the decoder step, the prefill, the encoder: at equal slack, audio from frames
  // already made first, then utterances already under way.
  std::vector<std::unique_ptr<scheduler::StepKind>> make_kinds(
      DeviceRuntime& runtime, const scheduler::SchedulerOptions& scheduling) const override;
};

}  // namespace voxd::sambert
