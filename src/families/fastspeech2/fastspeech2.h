// FastSpeech2 acoustic model: symbol ids -> mel spectrogram, behaving exactly as
// ming024/FastSpeech2 in eval mode (model/fastspeech2.py, model/modules.py, transformer/*.py),
// so its checkpoints load by their state-dict names and give the same mels.
//
// Forward, for a batch padded with id 0 (Constants.PAD) to T = the longest sequence; "padded
// rows" are positions t >= the sequence's length (get_mask_from_lengths: True = padding):
//   encoder    src_word_emb(ids) + position table, then FFT blocks with the source lengths
//   speaker    + speaker_emb[speaker] on every row, padded rows included (multi-speaker models)
//   variance   log_d = duration_predictor(x). Pitch, then energy, at phoneme level (before the
//              length regulator) or frame level (after it): prediction = predictor(x) · control,
//              x += embedding[bucketize(prediction, bins)] on every row, padded rows included
//   durations  d = clamp(round(exp(log_d) − 1) · duration_scale, min 0) in float32, round half
//              to even; the length regulator repeats row t int(d) times (truncation)
//   decoder    + position table, FFT blocks with the mel lengths, mel_linear
//   postnet    convs with BatchNorm (folded at load), tanh on all but the last; mel + postnet(mel)
// FFT block: h = LN(x + fc(attention(x))), padded rows zeroed; out = LN(h + conv_k1(relu(
// conv_k0(h)))), padded rows zeroed. Attention: per head softmax(q·kᵀ / sqrt(d_k)) over the
// unpadded keys, d_k = hidden / heads (floor division, as the original).
// A sequence longer than max_seq_len gets a freshly computed sinusoid table (encoder and decoder
// alike, the original's eval path); otherwise the position_enc parameters are used.
//
// Quirks of the original reproduced on purpose:
//   - the energy prediction is scaled by pitch_scale (ming024 passes p_control to
//     get_energy_embedding at both levels); energy_scale has no effect;
//   - the variance predictor's second conv pads by 1 whatever its kernel (so only kernel 3 runs);
//   - padded rows carry the speaker and pitch/energy embeddings into the predictors' convs, and
//     the postnet runs over padded mel frames (mel_linear's bias), so a sequence's output in a
//     batch differs slightly at its end from its output alone.
// One divergence: when every sequence gets zero frames the original fails in the postnet; here
// forward returns a [B, 0, n_mels] mel with zero lengths.
//
// Design note: the attention and feed-forward code are free functions in fastspeech2.cpp taking
// plain weight structs, written in ops only. An autoregressive (GPT-style) model will reuse them
// with AttentionParams{causal, key_lengths, query_offsets} over a KV cache; they move to a shared
// header when that model lands.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/ops.h"
#include "core/weights.h"

namespace voxd {

// Where a pitch or energy feature is predicted: per input symbol or per mel frame
// (preprocess.yaml's preprocessing.pitch.feature / preprocessing.energy.feature).
enum class FeatureLevel { Phoneme, Frame };
// How the variance bins were made from the stats: linspace(min, max) or exp(linspace(log min,
// log max)). The bins themselves are state-dict entries, so this only documents the checkpoint.
enum class Quantization { Linear, Log };

// The acoustic section of a voice's config.json (docs/voice-format.md): ming024's model.yaml
// as "model", the feature levels and the dataset stats. Dropout fields are accepted and ignored.
struct FastSpeech2Config {
  int64_t encoder_layers = 4;
  int64_t encoder_heads = 2;
  int64_t encoder_hidden = 256;
  int64_t decoder_layers = 6;
  int64_t decoder_heads = 2;
  int64_t decoder_hidden = 256;
  int64_t conv_filter_size = 1024;
  std::array<int64_t, 2> conv_kernel_size{9, 1};
  int64_t variance_filter_size = 256;
  int64_t variance_kernel_size = 3;
  Quantization pitch_quantization = Quantization::Linear;
  Quantization energy_quantization = Quantization::Linear;
  int64_t n_bins = 256;
  bool multi_speaker = false;
  int64_t max_seq_len = 1000;
  FeatureLevel pitch_feature_level = FeatureLevel::Phoneme;
  FeatureLevel energy_feature_level = FeatureLevel::Phoneme;
  // stats.json's [min, max, mean, std] (only min and max are required); absent when the config
  // has no "stats". Not used by the forward pass: the bins are in the weights.
  std::optional<std::array<double, 4>> pitch_stats;
  std::optional<std::array<double, 4>> energy_stats;
  // Output channels of mel_linear (the voice's n_mels; not part of the acoustic section).
  int64_t n_mels = 80;
  // Rows of speaker_emb the weights must have; 0 takes whatever they have.
  int64_t n_speakers = 0;

  // Parses and validates the acoustic section `j`; throws voxd::InputError "<where>: field
  // '<path>' ..." saying what was expected.
  static FastSpeech2Config from_json(const nlohmann::json& j, const std::string& where);
  // Throws voxd::InputError naming `where` and the field for a config the original could not
  // build or run (non-positive sizes, even kernels, variance kernel other than 3, encoder and
  // decoder widths that differ, n_bins < 2, log bins over a non-positive range).
  void validate(const std::string& where) const;
};

// Values that replace the variance adaptor's pitch and energy predictions as what bucketize
// reads, as ming024's pitch and energy targets do: one list per sequence, of one value per input
// symbol for a phoneme-level feature or one per frame (the sequence's mel length) for a
// frame-level one. An empty field leaves that feature predicted. The control does not apply to
// forced values.
struct ForcedFeatures {
  std::vector<std::vector<float>> pitch;
  std::vector<std::vector<float>> energy;
};

// ming024's synthesize.py controls: d_control, p_control, e_control.
struct SynthesisControls {
  float duration_scale = 1.0f;
  float pitch_scale = 1.0f;
  float energy_scale = 1.0f;  // ignored, as in the original (energy uses pitch_scale)
  // Zero the rows past each sequence's length between all layers, so that every sequence of a
  // padded batch gets the output it gets alone. The original lets the padding reach the last
  // frames of a batch's shorter sequences (its variance predictors' second convs, the predictor
  // after a variance embedding and the postnet see padded rows); false reproduces that.
  bool mask_padding = false;
  // Pad the batch to at least this many symbols in encode() and mel frames in decode() (0: to its
  // longest sequence), so that steps of nearby lengths share one shape: one plan, one set of
  // gemm shapes and arena sizes. Needs mask_padding, which keeps the padding out of every
  // sequence's output.
  int64_t pad_to_phonemes = 0;
  int64_t pad_to_frames = 0;
};

// What forward returns for a batch of B sequences.
struct AcousticOutput {
  // [B, T_mel, n_mels] postnet output on the context's device, T_mel = max(mel_lengths) or
  // SynthesisControls::pad_to_frames, in the weights' dtype, F32 for BF16 (PrecisionPolicy's stream
  // dtype). Frames past a sequence's length are padding (not zeroed, as in the original).
  Tensor mel;
  std::vector<int64_t> mel_lengths;
  // Frames per input symbol (the length regulator's int() of the rounded durations, or the
  // forced durations when forward was given them).
  std::vector<std::vector<int64_t>> durations;
};

// What FastSpeech2::encode hands to FastSpeech2::decode: the first step's results, from which
// the second step's shape [B, T_mel] is known.
struct AcousticEncoding {
  // [B, T, hidden] on the context's device in the mel's dtype: the encoder output with the
  // speaker and the phoneme-level pitch and energy embeddings added.
  Tensor hidden;
  std::vector<int64_t> src_lengths;
  // Frames per input symbol, and their sum per sequence, as AcousticOutput reports them.
  std::vector<std::vector<int64_t>> durations;
  std::vector<int64_t> mel_lengths;
};

// What FastSpeech2::encode_on_device leaves on the device.
struct DeviceEncoding {
  Tensor hidden;         // [B, T, hidden]: as AcousticEncoding::hidden
  Tensor log_durations;  // [B, T]: the duration predictor's output, 0 at padded rows
};

// Intermediate results forward keeps when asked for them (tests, analysis), in the mel's dtype
// (the buckets in I64).
struct FastSpeech2Debug {
  Tensor mel_before_postnet;  // [B, T_mel, n_mels]
  Tensor log_durations;       // [B, T], 0 at padded rows
  // Predictions, [B, T] or [B, T_mel] by feature level, after the control; predicted even when
  // forced values replace them.
  Tensor pitch;
  Tensor energy;
  // The embedding rows added for pitch and energy (bucketize of the prediction, or of the
  // forced values), shaped like the predictions.
  Tensor pitch_buckets;
  Tensor energy_buckets;
  // clamp(round(exp(log_d) − 1) · duration_scale, 0) per input symbol, before int().
  std::vector<std::vector<float>> rounded_durations;
};

// A loaded FastSpeech2: parameters on one device, ready to run. Cheap to copy (the parameters
// are shared).
class FastSpeech2 {
 public:
  // Reads ming024's state-dict names from `weights` (encoder.*, variance_adaptor.*, decoder.*,
  // mel_linear.*, postnet.convolutions.N.{0.conv,1}.*, speaker_emb.weight), checks each shape
  // against `config` (vocabulary, speaker count and postnet size are taken from the weights),
  // folds BatchNorm into the postnet convs and moves everything to ctx's device in the dtypes
  // PrecisionPolicy::for_weights(dtype) gives (the bins stay F32). A missing or misshapen tensor
  // throws voxd::Error naming it.
  static FastSpeech2 load(Context& ctx, const FastSpeech2Config& config,
                          const WeightSource& weights, DType dtype = DType::F32);

  // Runs the batch `ids` (one non-empty id list per sequence) with one speaker per sequence
  // (`speakers` empty means speaker 0 for all). An id outside [0, n_symbols()) or a speaker
  // outside [0, n_speakers()) throws voxd::InputError naming it. `debug`, when given, receives
  // the intermediate results.
  //
  // `forced_durations`, when not empty, replaces the predicted durations: one list per sequence,
  // as long as that sequence, of frame counts >= 0 that the length regulator uses as they are
  // (duration_scale does not apply to them). The duration predictor still runs: debug's
  // log_durations and rounded_durations keep the predicted values, so a caller can see how
  // they differ. Uses: duration control (durations from an aligner or an editor), and comparing
  // frame-level outputs across precisions with the same frames. A list of the wrong count or
  // length, or a negative count, throws voxd::InputError naming it.
  //
  // `forced_features` likewise replaces what pitch and energy bucketize reads (see
  // ForcedFeatures); the predictors still run and debug keeps their predictions, while debug's
  // buckets are those of the forced values. Uses: pitch and energy control from outside, and
  // comparing outputs across precisions with the same embedding rows. A list of the wrong count
  // or length, or a value that is not finite, throws voxd::InputError naming it.
  AcousticOutput forward(Context& ctx, const std::vector<std::vector<int64_t>>& ids,
                         const std::vector<int64_t>& speakers, const SynthesisControls& controls,
                         FastSpeech2Debug* debug = nullptr,
                         const std::vector<std::vector<int64_t>>& forced_durations = {},
                         const ForcedFeatures& forced_features = {}) const;

  // forward() in two steps, so each can run in its own workspace arena: encode runs the encoder,
  // the duration predictor and the phoneme-level variance at (B, T) and reads the durations back
  // to the host (debug receives log_durations, rounded_durations and the phoneme-level pitch and
  // energy); decode runs the length regulator, the frame-level variance, the decoder and the
  // postnet at (B, T, T_mel) (debug receives the frame-level pitch and energy and
  // mel_before_postnet). Each uses the forced features of its level. Arguments and errors as
  // forward's; decode(encode(...)) is forward.
  AcousticEncoding encode(Context& ctx, const std::vector<std::vector<int64_t>>& ids,
                          const std::vector<int64_t>& speakers, const SynthesisControls& controls,
                          FastSpeech2Debug* debug = nullptr,
                          const std::vector<std::vector<int64_t>>& forced_durations = {},
                          const ForcedFeatures& forced_features = {}) const;
  // `encoding.hidden` may live in another allocator than ctx's (it is only read). Throws
  // voxd::Error for an encoding of the wrong width or with lists of the wrong count.
  AcousticOutput decode(Context& ctx, const AcousticEncoding& encoding,
                        const SynthesisControls& controls, FastSpeech2Debug* debug = nullptr,
                        const ForcedFeatures& forced_features = {}) const;

  // encode() and decode() in parts, for recorded steps (AcousticGraphs): the device work of each
  // on inputs in device memory that a replay reads afresh, reading nothing back, and the host
  // work between them. No forced values, no debug; sequences up to max_seq_len symbols and
  // frames. The parts give what encode() and decode() give with the same controls.
  //
  // Checks ids, speakers and forced_durations as encode() does (voxd::InputError naming what is
  // wrong); returns the sequences' lengths.
  std::vector<int64_t> check_sequences(
      const std::vector<std::vector<int64_t>>& ids, const std::vector<int64_t>& speakers,
      const std::vector<std::vector<int64_t>>& forced_durations = {}) const;
  // encode()'s device work: ids I64 [B, T] (0-padded), lengths I64 [B] and speakers I64 [B]
  // (ignored by a single-speaker model), each contiguous on the host or ctx's device. Throws
  // voxd::InputError for other shapes, T > max_seq_len, or padding without mask_padding.
  DeviceEncoding encode_on_device(Context& ctx, const Tensor& ids, const Tensor& lengths,
                                  const Tensor& speakers, const SynthesisControls& controls) const;
  // encode()'s host work: the frames per symbol of sequences of `lengths` symbols from their
  // log durations ([B, T] on the host), and their sums; `rounded`, when given, receives the
  // durations before int() (FastSpeech2Debug::rounded_durations). The result's hidden is left
  // undefined. Throws voxd::Error for a duration that is not a usable frame count.
  AcousticEncoding durations_from(const Tensor& log_durations, const std::vector<int64_t>& lengths,
                                  const SynthesisControls& controls,
                                  std::vector<std::vector<float>>* rounded = nullptr) const;
  // An encoding of sequences of `lengths` symbols with `durations` frames each (forced ones), their
  // sums as the mel lengths; hidden left undefined.
  static AcousticEncoding with_durations(std::vector<int64_t> lengths,
                                         std::vector<std::vector<int64_t>> durations);
  // decode()'s device work: hidden [B, T, hidden] (contiguous), frame_rows I64 [B, F] (the
  // length regulator as ops::length_regulation_rows(durations, T, F)) and mel_lengths I64 [B],
  // each on the host or ctx's device -> the mel [B, F, n_mels] as decode() gives it padded to F.
  Tensor decode_on_device(Context& ctx, const Tensor& hidden, const Tensor& frame_rows,
                          const Tensor& mel_lengths, const SynthesisControls& controls) const;

  const FastSpeech2Config& config() const { return config_; }
  // Rows of encoder.src_word_emb (the original's len(symbols) + 1).
  int64_t n_symbols() const;
  // Rows of speaker_emb; 1 for a single-speaker model.
  int64_t n_speakers() const;
  // The dtype of encode()'s hidden states and of the mel.
  DType hidden_dtype() const;

  struct Weights;

 private:
  FastSpeech2(FastSpeech2Config config, std::shared_ptr<const Weights> weights)
      : config_(std::move(config)), weights_(std::move(weights)) {}

  FastSpeech2Config config_;
  std::shared_ptr<const Weights> weights_;
};

}  // namespace voxd
