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
// ops, so it runs on every backend. Concatenations are not built: a linear layer over [a | b]
// runs as the sum of its column blocks over a and over b.
//
// The decoder's keys and values (its memory's and its own steps') live in pages of a
// PagedKvCache, read in place through windows of keys (ops::paged_attention's key starts), so
// that steps of many utterances, each at its own step, run as one batch (voxd serve); the
// encoder takes a batch padded and masked so that padding changes no utterance; the postnet runs
// over chunks as the decoder's frames come, its FSMN masked outside the utterance and its LSTM
// carrying its state.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/kv_pages.h"
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
  Tensor mel;  // [T, num_mels] on the context's device, the postnet output; undefined when T = 0
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

// One utterance after the encoder and the variance adaptor, on the host: the text its decoder
// memory is made of and the durations it is made with.
struct SambertEncoding {
  Tensor text;                       // [N, projection_units] F32: with pitch and energy added
  std::vector<float> log_durations;  // [N], the duration predictor's
};

// An utterance's frames: frames per token and the decoder's schedule.
struct SambertAlignment {
  std::vector<int64_t> durations;  // frames per token
  int64_t frames = 0;              // T, their sum
  int64_t steps = 0;               // decoder steps L = ceil(T / outputs_per_step)
  int64_t band_width = 0;          // the decoder's attention band, in steps
};

// An utterance's decoder memory before the model's projections, on the host: per step s the
// text of frames [s·r, (s + 1)·r) (each frame its token's text plus the position of the frame in
// the token; frames past T are the position 0 alone), and the speaker and emotion of the step's
// first frame.
struct SambertMemory {
  Tensor text;                   // [L, r · projection_units] F32
  std::vector<int64_t> speaker;  // [L]
  std::vector<int64_t> emotion;  // [L]
};

// One decoder step of several utterances, each at its own step s (tensors on the host or ctx's
// device; the floating ones in the model's dtype, the rest I64).
struct SambertStepInputs {
  Tensor previous_frame;  // [B, 1, num_mels]: the last frame of the utterance's previous step
                          // (zeros at step 0)
  Tensor memory_input;    // [B, 1, decoder_units]: prefill's projection of memory step s
  Tensor step_table;      // [B, P]: the pages of the utterance's own steps' keys and values
  Tensor steps;           // [B]: s
  Tensor step_starts;     // [B]: max(0, s − band), the first own step attended to
  Tensor memory_table;    // [B, P']: the pages of its memory's keys and values
  Tensor memory_ends;     // [B]: min(s + band, L − 1), the last memory step attended to
};

// The postnet over part of several utterances' decoder mel (chunks of a served stream, or a
// whole utterance). Row `first` of `window` is each item's first frame to make; the FSMN looks
// config().postnet_context() frames back and postnet_lookahead() ahead of each, so `window` holds
// them where the utterance has them, and `mask` says which rows are frames of the utterance.
struct SambertPostnetInputs {
  Tensor window;      // [B, W, num_mels] decoder mel on ctx's device, in the model's dtype
  Tensor mask;        // [B, W, 1] 1 on the utterance's frames, 0 elsewhere; undefined: every row
  int64_t first = 0;  // the row of the first frame to make
  std::vector<int64_t> counts;  // frames to make per item, from `first` (at most `rows`)
  int64_t rows = 0;             // frames made per item (those past an item's count: garbage)
  // The postnet LSTM's state [B, H] (F32, on ctx's device) before each item's first frame;
  // updated in place to its state after counts[b] frames.
  Tensor h, c;
};

// A loaded Sambert: parameters on one device, ready to run. Cheap to copy.
class Sambert {
 public:
  // Reads KAN-TTS's state-dict names from `weights`, checks each shape against `config` (the
  // vocabulary sizes are taken from the embedding tables) and moves everything to ctx's device
  // in the dtypes PrecisionPolicy::for_weights(dtype) gives: matrices and convolutions in the
  // compute dtype, LayerNorms and the encoder's and decoder's residual streams in the stream
  // dtype (F32 for BF16), and the duration predictor in F32 whatever the dtype (it is small, and
  // every token's frames come from it). A missing or misshapen tensor throws voxd::Error naming
  // it.
  static Sambert load(Context& ctx, const SambertConfig& config, const WeightSource& weights,
                      DType dtype = DType::F32);

  // The mel of one utterance: check, encode, align, prefill into pages of its own, decode step
  // by step, the postnet whole. Throws as check() and align() do. When every token gets 0
  // frames there is nothing to decode: no mel (the durations say why).
  SambertOutput synthesize(Context& ctx, const SambertTokens& tokens, SambertDebug* debug = nullptr,
                           const SambertLimits& limits = {}) const;

  // The parts synthesize runs, for a caller that runs many utterances' steps together (voxd
  // serve): every utterance is check()ed, encode()d (batched) and align()ed; its memory()
  // prefill()ed into pages of a PagedKvCache with page_size rows of [decoder_heads,
  // decoder_units / decoder_heads] in each of decoder_layers layers (make_cache()); its L steps
  // decode()d, batched with other utterances' at other steps; and its decoder mel through the
  // postnet(), in chunks or whole. Each is written in ops, so a planning context plans it.

  // An empty utterance, lists of different lengths, an id outside its table, or more tokens
  // than `limits` allow throw voxd::InputError naming the token and the channel.
  void check(const SambertTokens& tokens, const SambertLimits& limits = {}) const;
  // The encoder, pitch, energy and durations of each utterance of `batch` (checked), padded to
  // `padded_tokens` (at least the longest). `masked`: padded rows are kept from every valid row
  // (a batch, or one utterance shorter than padded_tokens, must be masked); unmasked, the batch
  // is one utterance of padded_tokens tokens. `debug` (text_hidden, pitch, energy,
  // log_durations) for a batch of one.
  std::vector<SambertEncoding> encode(Context& ctx, const std::vector<const SambertTokens*>& batch,
                                      int64_t padded_tokens, bool masked,
                                      SambertDebug* debug = nullptr) const;
  // Frames per token int(exp(l) − 1 + 0.5) and the band int(max(exp(l) − 1) / r + 0.5); 0 frames
  // when every token rounds to 0. Throws voxd::InputTooLongError for durations past
  // limits.max_frames (infinite included) and voxd::Error for a NaN one.
  SambertAlignment align(const std::vector<float>& log_durations,
                         const SambertLimits& limits = {}) const;
  // The decoder memory of `tokens` as `encoding` and `alignment` make it (host arithmetic).
  SambertMemory memory(const SambertTokens& tokens, const SambertEncoding& encoding,
                       const SambertAlignment& alignment) const;
  // A cache of `pages` pages of `page_size` decoder steps for every decoder layer, zeroed, from
  // ctx's allocator.
  PagedKvCache make_cache(Context& ctx, int64_t pages, int64_t page_size) const;
  // Writes each memory's keys and values, every layer's, into `cache` through pages[b] (at most
  // the pages padded_steps take) from position 0 (steps past the item's L land in its last page
  // or nowhere; no step reads them), the batch padded to `padded_steps` (at least the longest);
  // returns the input projection of each memory [B, padded_steps, decoder_units] on the host
  // (F32), which decode() takes a row of at each step. `debug` (memory) for a batch of one.
  Tensor prefill(Context& ctx, PagedKvCache& cache, const std::vector<const SambertMemory*>& batch,
                 const std::vector<const std::vector<int64_t>*>& pages, int64_t padded_steps,
                 SambertDebug* debug = nullptr) const;
  // One decoder step of every utterance of `in`: writes its step's keys and values into its
  // step pages at s and returns its r frames [B, 1, r · num_mels] on ctx's device.
  Tensor decode(Context& ctx, PagedKvCache& cache, const SambertStepInputs& in) const;
  // The postnet's frames [B, in.rows, num_mels] on ctx's device (see SambertPostnetInputs).
  Tensor postnet(Context& ctx, SambertPostnetInputs& in) const;
  // Rows of the checkpoint's position table: utterances padded to at most this many tokens take
  // their positions from it (longer ones compute the same sinusoids).
  int64_t stored_positions() const;

  const SambertConfig& config() const { return config_; }
  DType dtype() const;
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
