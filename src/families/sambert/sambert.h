// KAN-TTS's Sambert acoustic model (kantts/models/sambert/kantts_sambert.py, KanTtsSAMBERT):
// linguistic tokens -> mel spectrogram, computed as the original computes it in inference, so
// its checkpoints load by their state-dict names and give the same mels.
//
// Per utterance (N tokens; "~" already dropped):
//   encoder    the sum of the four channels' embeddings · sqrt(encoder_num_units) + the stored
//              position table (positions from 1), FFT blocks (pre-norm self-attention, residual
//              when the widths match; pre-norm conv FFN, kernels 3 and 1), LayerNorm, ling_proj
//   adaptor    pitch and energy: FSMN encoder, BiLSTM, one value per token, each embedded back
//              by a kernel-9 conv and added to the text; durations: a 2-layer LSTM run token by
//              token over [prenet(previous log duration) | text, speaker, emotion], ReLU'd;
//              frames per token int(exp(l) − 1 + 0.5); band int(max(exp(l) − 1) / r + 0.5)
//   regulator  text repeated per frame, padded with zeros to a multiple of r, plus the
//              interleaved sinusoid of each frame's 1-based index in its token (0 in the padding)
//   decoder    L = ceil(T / r) steps, each over memory group s ([r text frames | speaker |
//              emotion of the group's first frame]): prenet of the last frame of the previous
//              group, PNCA blocks attending to their own steps [s − band, s] and to the memory
//              groups [s, s + band], r frames out
//   postnet    FSMN encoder + LSTM + linear, a residual on the decoder's T frames
// Equal to the original up to rounding: attention multiplies by 1/sqrt(d_head) where KAN-TTS
// divides by it (the same for d_head 16, as every shipped config has). All of it is written in
// ops, so it runs on every backend. Concatenations are not built: a
// linear layer over [a | b] runs as the sum of its column blocks over a and over b.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/ops.h"
#include "core/weights.h"
#include "families/sambert/sambert_config.h"

namespace voxd {

// One utterance's linguistic input, one entry per token: the ids of its phone (sy), tone,
// syllable flag and word segment, and of its emotion and speaker, as KAN-TTS's linguistic unit
// numbers them.
struct SambertTokens {
  std::vector<std::array<int64_t, 4>> linguistic;
  std::vector<int64_t> emotion;
  std::vector<int64_t> speaker;
};

struct SambertOutput {
  Tensor mel;                      // [T, num_mels] on the context's device, the postnet output
  std::vector<int64_t> durations;  // frames per token (sum T)
  int64_t band_width = 0;          // the decoder's attention band, in steps
};

// How long an utterance may be: requests are refused past these, before anything is sized by
// them (a model can predict any duration).
struct SambertLimits {
  int64_t max_tokens = 1000;
  int64_t max_frames = 8000;  // 100 s at 16 kHz and hop 200
};

// Intermediate results synthesize keeps when asked for them (tests, analysis), on the host.
struct SambertDebug {
  Tensor text_hidden;    // [N, projection_units], the encoder's output
  Tensor pitch;          // [N]
  Tensor energy;         // [N]
  Tensor log_durations;  // [N]
  Tensor memory;         // [L, memory_units()], what the decoder attends to
  Tensor decoder_mel;    // [T, num_mels], before the postnet
};

// A loaded Sambert: parameters on one device, ready to run. Cheap to copy.
class Sambert {
 public:
  // Reads KAN-TTS's state-dict names from `weights`, checks each shape against `config` (the
  // vocabulary sizes are taken from the embedding tables) and moves everything to ctx's device.
  // Computes in F32 only for now (weights stored in F16 are converted). A missing or misshapen
  // tensor throws voxd::Error naming it.
  static Sambert load(Context& ctx, const SambertConfig& config, const WeightSource& weights,
                      DType dtype = DType::F32);

  // The mel of one utterance. An empty utterance, lists of different lengths or an id outside
  // its table throw voxd::InputError naming the token and the channel; so do an utterance past
  // `limits` (its tokens, or the frames its durations come to) and one whose every token rounds
  // to 0 frames.
  SambertOutput synthesize(Context& ctx, const SambertTokens& tokens, SambertDebug* debug = nullptr,
                           const SambertLimits& limits = {}) const;

  const SambertConfig& config() const { return config_; }
  // Rows of the tables: phone, tone, syllable flag, word segment.
  std::array<int64_t, 4> linguistic_vocabulary() const;
  int64_t n_emotions() const;
  int64_t n_speakers() const;

  struct Weights;

 private:
  Sambert(SambertConfig config, std::shared_ptr<const Weights> weights)
      : config_(std::move(config)), weights_(std::move(weights)) {}

  SambertConfig config_;
  std::shared_ptr<const Weights> weights_;
};

}  // namespace voxd
