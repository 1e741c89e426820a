#include "families/fastspeech2/workspace_steps.h"

#include <bit>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/workspace_arena.h"

namespace voxd {

int64_t padded_length(int64_t longest) {
  VOXD_CHECK(longest >= 1, "padded_length of a length below 1");
  if (longest <= 16) return longest;
  const int64_t step = int64_t{1} << (std::bit_width(static_cast<uint64_t>(longest)) - 4);
  return (longest + step - 1) / step * step;
}

namespace {

void require_at_least_one(int64_t value, const char* name) {
  if (value < 1) {
    throw InputError(std::string(name) + " must be at least 1 to plan a step, got " +
                     std::to_string(value));
  }
}

// The acoustic encoder step: encode, then move the hidden states out of the step's context into
// `keep`, where they wait for the decoder step.
AcousticEncoding encoder_step(Context& ctx, Context& keep, const FastSpeech2& model,
                              const std::vector<std::vector<int64_t>>& ids,
                              const std::vector<int64_t>& speakers,
                              const SynthesisControls& controls,
                              const std::vector<std::vector<int64_t>>& forced_durations) {
  AcousticEncoding encoding = model.encode(ctx, ids, speakers, controls, nullptr, forced_durations);
  encoding.hidden = ops::to_device(keep, encoding.hidden, encoding.hidden.dtype());
  return encoding;
}

// The acoustic decoder step; the mel leaves the step on the host.
AcousticOutput decoder_step(Context& ctx, const FastSpeech2& model,
                            const AcousticEncoding& encoding, const SynthesisControls& controls) {
  AcousticOutput out = model.decode(ctx, encoding, controls);
  out.mel = ops::to_host(ctx, out.mel);
  return out;
}

// The vocoder step: upload the host mel, vocode, audio back to the host.
Tensor vocoder_step(Context& ctx, const HifiGan& model, const Tensor& mel) {
  return ops::to_host(ctx, model.forward(ctx, ops::to_device(ctx, mel, model.dtype())));
}

}  // namespace

AcousticEncoderPlan plan_acoustic_encoder(Backend& backend, const FastSpeech2& model, int64_t batch,
                                          int64_t phonemes, bool mask_padding) {
  require_at_least_one(batch, "the batch size");
  require_at_least_one(phonemes, "the phonemes per sequence");
  // Any valid ids of the right shape do.
  const std::vector<std::vector<int64_t>> ids(static_cast<size_t>(batch),
                                              std::vector<int64_t>(static_cast<size_t>(phonemes)));
  WorkspaceArena kept(backend.device());
  Context keep = Context::for_planning(backend, kept);
  SynthesisControls controls;
  controls.mask_padding = mask_padding;
  AcousticEncoding encoding;  // its hidden states are the bytes kept
  AcousticEncoderPlan plan;
  plan.encoder = plan_workspace(backend, [&](Context& ctx) {
    encoding = encoder_step(ctx, keep, model, ids, {}, controls, {});
  });
  plan.hidden_bytes = kept.in_use();
  return plan;
}

ArenaLayout plan_acoustic_decoder(Backend& backend, const FastSpeech2& model, int64_t batch,
                                  int64_t phonemes, int64_t frames, bool mask_padding) {
  require_at_least_one(batch, "the batch size");
  require_at_least_one(phonemes, "the phonemes per sequence");
  require_at_least_one(frames, "the mel frames per sequence");
  // The encoder's output as it would leave its step, with no memory behind the hidden states
  // (planning never reads them) and durations that spread `frames` over the symbols.
  WorkspaceArena kept(backend.device());
  AcousticEncoding encoding;
  encoding.hidden =
      Tensor::empty({batch, phonemes, model.config().encoder_hidden}, model.hidden_dtype(), kept);
  std::vector<int64_t> durations(static_cast<size_t>(phonemes), frames / phonemes);
  for (int64_t t = 0; t < frames % phonemes; ++t) ++durations[static_cast<size_t>(t)];
  encoding.src_lengths.assign(static_cast<size_t>(batch), phonemes);
  encoding.durations.assign(static_cast<size_t>(batch), durations);
  encoding.mel_lengths.assign(static_cast<size_t>(batch), frames);
  SynthesisControls controls;
  controls.mask_padding = mask_padding;
  return plan_workspace(backend,
                        [&](Context& ctx) { (void)decoder_step(ctx, model, encoding, controls); });
}

AcousticPlan plan_acoustic(Backend& backend, const FastSpeech2& model, int64_t batch,
                           int64_t phonemes, int64_t frames, bool mask_padding) {
  return {plan_acoustic_encoder(backend, model, batch, phonemes, mask_padding),
          plan_acoustic_decoder(backend, model, batch, phonemes, frames, mask_padding)};
}

ArenaLayout plan_vocoder(Backend& backend, const HifiGan& model, int64_t chunks, int64_t frames) {
  require_at_least_one(chunks, "the vocoder chunks");
  require_at_least_one(frames, "the mel frames per vocoder chunk");
  // A host mel with no memory behind it: planning never reads it.
  WorkspaceArena host(Device::cpu());
  const Tensor mel = Tensor::empty({chunks, model.config().num_mels, frames}, DType::F32, host);
  return plan_workspace(backend, [&](Context& ctx) { (void)vocoder_step(ctx, model, mel); });
}

WorkspacePlan plan_voice(Backend& backend, const Voice& voice, uint64_t weights_bytes,
                         const std::optional<AcousticShape>& acoustic,
                         const std::optional<VocoderShape>& vocoder) {
  WorkspacePlan plan;
  plan.device = backend.device().to_string();
  plan.dtype = std::string(dtype_name(voice.vocoder().dtype()));
  plan.weights_bytes = weights_bytes;
  if (acoustic) {
    if (!voice.has_acoustic()) {
      throw InputError("voice '" + voice.config().name +
                       "' was loaded without its acoustic model, so it cannot be planned");
    }
    const AcousticShape& s = *acoustic;
    const AcousticPlan a = plan_acoustic(backend, voice.acoustic(), s.batch, s.phonemes, s.frames);
    const std::string shape =
        "batch " + std::to_string(s.batch) + " x " + std::to_string(s.phonemes) + " phonemes";
    plan.stages.push_back({"acoustic encoder", shape, a.encoder.bytes(), a.hidden_bytes});
    plan.stages.push_back({"acoustic decoder",
                           shape + " -> " + std::to_string(s.frames) + " frames", a.decoder.bytes(),
                           a.hidden_bytes});
  }
  if (vocoder) {
    const VocoderShape& s = *vocoder;
    plan.stages.push_back(
        {"vocoder", std::to_string(s.chunks) + " chunks x " + std::to_string(s.frames) + " frames",
         plan_vocoder(backend, voice.vocoder(), s.chunks, s.frames).bytes(), 0});
  }
  return plan;
}

AcousticOutput run_acoustic_steps(Backend& backend, Allocator& upstream, const FastSpeech2& model,
                                  const std::vector<std::vector<int64_t>>& ids,
                                  const std::vector<int64_t>& speakers,
                                  const SynthesisControls& controls,
                                  const std::vector<std::vector<int64_t>>& forced_durations,
                                  std::vector<StepMemory>* memory) {
  ArenaLayout encoder_plan;
  {
    WorkspaceArena kept(backend.device());
    Context keep = Context::for_planning(backend, kept);
    encoder_plan = plan_workspace(backend, [&](Context& ctx) {
      (void)encoder_step(ctx, keep, model, ids, speakers, controls, forced_durations);
    });
  }
  AcousticEncoding encoding;
  Context keep(backend, upstream);
  const StepMemory encoder{
      encoder_plan.bytes(), run_in_workspace(backend, upstream, encoder_plan, [&](Context& ctx) {
        encoding = encoder_step(ctx, keep, model, ids, speakers, controls, forced_durations);
      })};

  const ArenaLayout decoder_plan = plan_workspace(
      backend, [&](Context& ctx) { (void)decoder_step(ctx, model, encoding, controls); });
  AcousticOutput out;
  const StepMemory decoder{decoder_plan.bytes(),
                           run_in_workspace(backend, upstream, decoder_plan, [&](Context& ctx) {
                             out = decoder_step(ctx, model, encoding, controls);
                           })};
  if (memory) *memory = {encoder, decoder};
  return out;
}

Tensor run_vocoder_step(Backend& backend, Allocator& upstream, const HifiGan& model,
                        const Tensor& mel, StepMemory* memory) {
  const ArenaLayout plan =
      plan_workspace(backend, [&](Context& ctx) { (void)vocoder_step(ctx, model, mel); });
  return run_vocoder_step(backend, upstream, model, mel, plan, memory);
}

AcousticEncoding run_acoustic_encoder_step(Backend& backend, Allocator& upstream,
                                           const FastSpeech2& model,
                                           const std::vector<std::vector<int64_t>>& ids,
                                           const std::vector<int64_t>& speakers,
                                           const SynthesisControls& controls,
                                           const ArenaLayout& plan, StepMemory* memory) {
  Context keep(backend, upstream);
  AcousticEncoding encoding;
  const uint64_t high_water = run_in_workspace(backend, upstream, plan, [&](Context& ctx) {
    encoding = encoder_step(ctx, keep, model, ids, speakers, controls, {});
  });
  if (memory) *memory = {plan.bytes(), high_water};
  return encoding;
}

AcousticOutput run_acoustic_decoder_step(Backend& backend, Allocator& upstream,
                                         const FastSpeech2& model, const AcousticEncoding& encoding,
                                         const SynthesisControls& controls, const ArenaLayout& plan,
                                         StepMemory* memory) {
  AcousticOutput out;
  const uint64_t high_water = run_in_workspace(backend, upstream, plan, [&](Context& ctx) {
    out = decoder_step(ctx, model, encoding, controls);
  });
  if (memory) *memory = {plan.bytes(), high_water};
  return out;
}

Tensor run_vocoder_step(Backend& backend, Allocator& upstream, const HifiGan& model,
                        const Tensor& mel, const ArenaLayout& plan, StepMemory* memory) {
  Tensor audio;
  const uint64_t high_water = run_in_workspace(
      backend, upstream, plan, [&](Context& ctx) { audio = vocoder_step(ctx, model, mel); });
  if (memory) *memory = {plan.bytes(), high_water};
  return audio;
}

AcousticEncoding select_sequences(const AcousticEncoding& encoding, size_t first, size_t count) {
  VOXD_CHECK(first + count <= encoding.mel_lengths.size(),
             "select_sequences past the end of the encoding");
  const auto begin = static_cast<std::ptrdiff_t>(first);
  const auto end = static_cast<std::ptrdiff_t>(first + count);
  AcousticEncoding out;
  out.hidden = encoding.hidden.narrow(0, static_cast<int64_t>(first), static_cast<int64_t>(count));
  out.src_lengths.assign(encoding.src_lengths.begin() + begin, encoding.src_lengths.begin() + end);
  out.durations.assign(encoding.durations.begin() + begin, encoding.durations.begin() + end);
  out.mel_lengths.assign(encoding.mel_lengths.begin() + begin, encoding.mel_lengths.begin() + end);
  return out;
}

}  // namespace voxd
