// The steps a voice runs in, each planned before it runs and run in its own workspace arena
// (core/workspace_plan.h): the acoustic encoder at (batch, phonemes), the acoustic decoder at
// (batch, phonemes, frames) once the durations are known, and the vocoder at (chunks, frames).
// Planning by shape (voxd mem, admission within a memory budget) and running share the steps'
// code, so a plan made for a shape is what a run at that shape takes (docs/memory.md).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/workspace_plan.h"
#include "families/fastspeech2/fastspeech2.h"
#include "families/fastspeech2/hifigan.h"
#include "families/fastspeech2/voice.h"

namespace voxd {

// The length a step pads `longest` (≥ 1) symbols or mel frames to: `longest` itself up to 16,
// above that rounded up to the next multiple of an eighth of its power of two (200 -> 208,
// 1000 -> 1024): at most 1/8 of padding, 8 sizes per octave.
int64_t padded_length(int64_t longest);

// Planned memory of the acoustic encoder step.
struct AcousticEncoderPlan {
  ArenaLayout encoder;  // the step's arena
  // The encoder's hidden states, moved out of its arena and kept until the decoder step is done.
  uint64_t hidden_bytes = 0;
};

// Planned memory of the acoustic model's two steps: the encoder's, then the decoder step's arena.
struct AcousticPlan : AcousticEncoderPlan {
  ArenaLayout decoder;
};

// FastSpeech2 for `batch` sequences padded to `phonemes` symbols that make `frames` mel frames
// (the longest sequence's); each at least 1, else voxd::InputError naming it. `mask_padding`:
// planned for steps run with SynthesisControls::mask_padding (its masks take scratch).
AcousticPlan plan_acoustic(Backend& backend, const FastSpeech2& model, int64_t batch,
                           int64_t phonemes, int64_t frames, bool mask_padding = false);
// plan_acoustic's two halves, for a caller that plans the encoder before the frames are known
// and caches each by its own shape: the encoder's plan does not depend on the frames, and the
// decoder is planned on hidden states of the encoder's shape without planning the encoder.
AcousticEncoderPlan plan_acoustic_encoder(Backend& backend, const FastSpeech2& model, int64_t batch,
                                          int64_t phonemes, bool mask_padding = false);
ArenaLayout plan_acoustic_decoder(Backend& backend, const FastSpeech2& model, int64_t batch,
                                  int64_t phonemes, int64_t frames, bool mask_padding = false);
// HiFiGAN on `chunks` mels of `frames` frames (uploaded from the host in the step, in the
// parameters' dtype); each at least 1, else voxd::InputError naming it.
ArenaLayout plan_vocoder(Backend& backend, const HifiGan& model, int64_t chunks, int64_t frames);

struct AcousticShape {
  int64_t batch = 1;
  int64_t phonemes = 1;
  int64_t frames = 1;
};
struct VocoderShape {
  int64_t chunks = 1;
  int64_t frames = 1;
};

// The plan of `voice` (with `weights_bytes` of parameters on the device) for the steps asked for:
// "acoustic encoder" and "acoustic decoder" (carrying the hidden states) when `acoustic` is
// given, "vocoder" when `vocoder` is given. Throws voxd::InputError for an acoustic shape when
// the voice was loaded without its acoustic model.
WorkspacePlan plan_voice(Backend& backend, const Voice& voice, uint64_t weights_bytes,
                         const std::optional<AcousticShape>& acoustic,
                         const std::optional<VocoderShape>& vocoder);

// What running one step measured: its plan and its arena's high-water mark (equal, unless the
// step allocated differently from its planning pass).
struct StepMemory {
  uint64_t planned_bytes = 0;
  uint64_t high_water_bytes = 0;
};

// FastSpeech2::forward in its two steps on `backend`: the encoder step planned for these inputs
// and run in its own arena from `upstream`, its hidden states moved to `upstream`, then the
// decoder step planned for the durations it found and run in another. The mel comes back on the
// host (F32). `memory`, when given, receives both steps' StepMemory. Arguments and errors as
// FastSpeech2::forward.
AcousticOutput run_acoustic_steps(Backend& backend, Allocator& upstream, const FastSpeech2& model,
                                  const std::vector<std::vector<int64_t>>& ids,
                                  const std::vector<int64_t>& speakers,
                                  const SynthesisControls& controls,
                                  const std::vector<std::vector<int64_t>>& forced_durations = {},
                                  std::vector<StepMemory>* memory = nullptr);

// HiFiGAN on a host mel [C, num_mels, F] in one planned arena from `upstream`: the mel is uploaded
// in the parameters' dtype, the audio [C, samples] comes back on the host (F32).
Tensor run_vocoder_step(Backend& backend, Allocator& upstream, const HifiGan& model,
                        const Tensor& mel, StepMemory* memory = nullptr);

// The same steps for a caller that plans by shape before it runs (a scheduler admitting work
// within a memory budget, with plans cached by shape): each runs in an arena following `plan`,
// the plan of its shape, and throws voxd::Error when the step needs more.

// The acoustic encoder step at (ids.size(), longest sequence) in an arena following
// plan_acoustic(...).encoder; the encoding's hidden states, plan_acoustic's hidden_bytes, go to
// `upstream`. Arguments and errors as FastSpeech2::encode.
AcousticEncoding run_acoustic_encoder_step(Backend& backend, Allocator& upstream,
                                           const FastSpeech2& model,
                                           const std::vector<std::vector<int64_t>>& ids,
                                           const std::vector<int64_t>& speakers,
                                           const SynthesisControls& controls,
                                           const ArenaLayout& plan, StepMemory* memory = nullptr);
// The acoustic decoder step on `encoding` (of any batch cut from an encoder step's) in an arena
// following plan_acoustic(...).decoder for its (batch, phonemes, longest mel); the mel comes back
// on the host (F32).
AcousticOutput run_acoustic_decoder_step(Backend& backend, Allocator& upstream,
                                         const FastSpeech2& model, const AcousticEncoding& encoding,
                                         const SynthesisControls& controls, const ArenaLayout& plan,
                                         StepMemory* memory = nullptr);
// HiFiGAN on a host mel [C, num_mels, F] in an arena following plan_vocoder(C, F).
Tensor run_vocoder_step(Backend& backend, Allocator& upstream, const HifiGan& model,
                        const Tensor& mel, const ArenaLayout& plan, StepMemory* memory = nullptr);

// The encoding of sequences [first, first + count) of `encoding`: its hidden states a view of
// the same memory.
AcousticEncoding select_sequences(const AcousticEncoding& encoding, size_t first, size_t count);

}  // namespace voxd
