#include "families/fastspeech2/fastspeech2.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/weight_loading.h"

namespace voxd {

// ---------------------------------------------------------------------------------------------
// Weights and the transformer building blocks. The blocks are written in ops only, over plain
// weight structs, so another transformer model can reuse them.

namespace {

constexpr float kLayerNormEps = 1e-5f;  // nn.LayerNorm's default
constexpr double kBatchNormEps = 1e-5;  // nn.BatchNorm1d's default

struct LinearWeights {
  Tensor weight;  // [out, in]
  Tensor bias;    // [out]
};

struct ConvWeights {
  // [Cout, Cin, K]: a view of `arranged` where that holds it (ops::conv1d_rows_weight_view).
  Tensor weight;
  Tensor bias;  // [Cout]
  int64_t padding = 0;
  Tensor arranged;  // the weight in the backend's order (ops::arrange_conv1d_rows_weight), or none
};

struct NormWeights {
  Tensor gamma;
  Tensor beta;
};

// MultiHeadAttention: q/k/v projections to heads · d_k features, output projection `fc`.
struct AttentionWeights {
  LinearWeights q, k, v, fc;
  int64_t heads = 0;
  int64_t head_dim = 0;
};

// PositionwiseFeedForward: conv w1 -> ReLU -> conv w2.
struct FeedForwardWeights {
  ConvWeights w1, w2;
};

// FFTBlock: post-LN attention and feed-forward sublayers.
struct FftBlockWeights {
  AttentionWeights attention;
  NormWeights attention_norm;
  FeedForwardWeights ffn;
  NormWeights ffn_norm;
};

// VariancePredictor: (conv -> ReLU -> LayerNorm) twice -> linear to one value per row (the
// output head, in the stream dtype).
struct PredictorWeights {
  ConvWeights conv1, conv2;
  NormWeights norm1, norm2;
  LinearWeights linear;
};

// A pitch or energy branch: its predictor, bins and embedding table.
struct VarianceWeights {
  PredictorWeights predictor;
  Tensor bins;   // [n_bins - 1], F32, ascending
  Tensor table;  // [n_bins, hidden]
};

}  // namespace

// Matrix weights (attention, feed-forward and predictor convs, mel_linear, postnet) are in the
// policy's compute dtype; norms, embedding and position tables and the predictors' output heads
// in its stream dtype.
struct FastSpeech2::Weights {
  PrecisionPolicy precision;
  int64_t n_symbols = 0;
  int64_t n_speakers = 1;
  Tensor src_word_emb;      // [n_symbols, hidden]
  Tensor encoder_position;  // [1, max_seq_len + 1, hidden]
  std::vector<FftBlockWeights> encoder;
  Tensor speaker_emb;  // [n_speakers, hidden]; undefined for single-speaker models
  PredictorWeights duration;
  VarianceWeights pitch, energy;
  Tensor decoder_position;
  std::vector<FftBlockWeights> decoder;
  LinearWeights mel_linear;
  std::vector<ConvWeights> postnet;  // BatchNorm folded in
};

namespace {

// x [B, T, C] -> conv over T [-> ReLU] -> [B, T, Cout].
Tensor conv_rows(Context& ctx, const Tensor& x, const ConvWeights& w,
                 ops::RowsActivation activation = ops::RowsActivation::None) {
  return ops::conv1d_rows(ctx, x, w.weight, w.bias, {.padding = w.padding},
                          w.arranged.defined() ? &w.arranged : nullptr, activation);
}

// Each sequence's length, on the host or as I64 [B] on the device (a recorded step's, which the
// kernels read when it replays: its lengths change from replay to replay).
struct Lengths {
  std::vector<int64_t> host;
  Tensor device;
};

// Rows t >= lengths[b] of x [B, T, C] zeroed in place.
void zero_beyond(Context& ctx, Tensor& x, const Lengths& lengths) {
  if (lengths.device.defined()) {
    ops::zero_beyond_lengths(ctx, x, lengths.device);
  } else {
    ops::zero_beyond_lengths(ctx, x, lengths.host);
  }
}

// Multi-head attention of x [B, T, C] over itself, before the residual: fc(attention(q, k, v)).
Tensor self_attention(Context& ctx, const Tensor& x, const AttentionWeights& w,
                      const AttentionParams& params) {
  const int64_t batch = x.size(0);
  const int64_t t = x.size(1);
  const Shape heads = {batch, t, w.heads, w.head_dim};
  Tensor out;
  {
    Tensor q = ops::linear(ctx, x, w.q.weight, w.q.bias).reshape(heads);
    Tensor k = ops::linear(ctx, x, w.k.weight, w.k.bias).reshape(heads);
    Tensor v = ops::linear(ctx, x, w.v.weight, w.v.bias).reshape(heads);
    out = ops::attention(ctx, q, k, v, params);
  }
  return ops::linear(ctx, out.reshape({batch, t, w.heads * w.head_dim}), w.fc.weight, w.fc.bias);
}

// Position-wise feed-forward of x [B, T, C], before the residual: w2(relu(w1(x))) over T.
Tensor feed_forward(Context& ctx, const Tensor& x, const FeedForwardWeights& w) {
  const Tensor h = conv_rows(ctx, x, w.w1, ops::RowsActivation::Relu);
  return conv_rows(ctx, h, w.w2);
}

// FFTBlock.forward of x [B, T, C] in the stream dtype: the sublayers run in the compute dtype, the
// residual sums and norms in the stream dtype; rows t >= lengths[b] are zeroed after each
// sublayer.
Tensor fft_block(Context& ctx, const Tensor& x, const FftBlockWeights& w, const Lengths& lengths,
                 const PrecisionPolicy& precision) {
  AttentionParams params;
  params.scale = 1.0f / std::sqrt(static_cast<float>(w.attention.head_dim));
  params.key_lengths = lengths.host;
  params.key_length_tensor = lengths.device;
  Tensor h = precision.to_stream(
      ctx, self_attention(ctx, precision.to_compute(ctx, x), w.attention, params));
  h = ops::add_layer_norm(ctx, h, x, w.attention_norm.gamma, w.attention_norm.beta, kLayerNormEps);
  zero_beyond(ctx, h, lengths);
  Tensor out = precision.to_stream(ctx, feed_forward(ctx, precision.to_compute(ctx, h), w.ffn));
  out = ops::add_layer_norm(ctx, out, h, w.ffn_norm.gamma, w.ffn_norm.beta, kLayerNormEps);
  zero_beyond(ctx, out, lengths);
  return out;
}

// get_sinusoid_encoding_table(rows, width) as [1, rows, width]: angle pos / 10000^(2⌊i/2⌋ /
// width), sin at even i, cos at odd i, computed in double and rounded to float.
Tensor sinusoid_table(int64_t rows, int64_t width) {
  std::vector<float> values(static_cast<size_t>(rows * width));
  for (int64_t i = 0; i < width; ++i) {
    const double rate =
        std::pow(10000.0, static_cast<double>(2 * (i / 2)) / static_cast<double>(width));
    for (int64_t pos = 0; pos < rows; ++pos) {
      const double angle = static_cast<double>(pos) / rate;
      values[static_cast<size_t>(pos * width + i)] =
          static_cast<float>(i % 2 == 0 ? std::sin(angle) : std::cos(angle));
    }
  }
  return Tensor::from_vector({1, rows, width}, values);
}

// x [B, T, C] += the eval-mode position table: the parameter's first T rows, or a fresh table
// when T > max_seq_len.
void add_positions(Context& ctx, Tensor& x, const Tensor& parameter, int64_t max_seq_len) {
  const int64_t t = x.size(1);
  if (t > max_seq_len) {
    ops::add_(ctx, x, ops::to_device(ctx, sinusoid_table(t, x.size(2)), x.dtype()));
  } else {
    ops::add_(ctx, x, parameter.narrow(1, 0, t));
  }
}

// VariancePredictor.forward of x [B, T, C] (stream dtype) -> [B, T] in the stream dtype, zero at
// rows t >= lengths[b]. The convs run in the compute dtype, the norms and the output head in
// the stream dtype.
Tensor predict(Context& ctx, const Tensor& x, const PredictorWeights& w, const Lengths& lengths,
               const PrecisionPolicy& precision, bool mask_padding) {
  Tensor out;
  {
    Tensor h = conv_rows(ctx, precision.to_compute(ctx, x), w.conv1, ops::RowsActivation::Relu);
    h = ops::layer_norm(ctx, precision.to_stream(ctx, h), w.norm1.gamma, w.norm1.beta,
                        kLayerNormEps);
    if (mask_padding) zero_beyond(ctx, h, lengths);
    h = conv_rows(ctx, precision.to_compute(ctx, h), w.conv2, ops::RowsActivation::Relu);
    h = ops::layer_norm(ctx, precision.to_stream(ctx, h), w.norm2.gamma, w.norm2.beta,
                        kLayerNormEps);
    out = ops::linear(ctx, h, w.linear.weight, w.linear.bias);
  }
  zero_beyond(ctx, out, lengths);
  return out.reshape({x.size(0), x.size(1)});
}

// One pitch or energy step's results.
struct VarianceResult {
  Tensor prediction;  // [B, T], times the control, in the stream dtype
  Tensor buckets;     // [B, T] I64: the embedding rows added to x
};

// get_pitch_embedding / get_energy_embedding: the prediction times `control`, and x +=
// table[bucketize(values, bins)] on every row, padded rows included, where values are the
// prediction or, when `forced` (F32 [B, T]) is defined, the forced values (as the original's
// targets). The bucket indices stay on the device (gather_rows: bucketize's are within the
// table), so nothing waits for them.
VarianceResult add_variance(Context& ctx, Tensor& x, const VarianceWeights& w,
                            const Lengths& lengths, float control, const PrecisionPolicy& precision,
                            const Tensor& forced, bool mask_padding) {
  VarianceResult result;
  result.prediction =
      ops::scale(ctx, predict(ctx, x, w.predictor, lengths, precision, mask_padding), control);
  const Tensor values = forced.defined() ? forced
                        : result.prediction.dtype() == DType::F32
                            ? result.prediction
                            : ops::to_device(ctx, result.prediction, DType::F32);
  result.buckets = ops::bucketize(ctx, values, w.bins);
  ops::add_(ctx, x, ops::gather_rows(ctx, w.table, result.buckets));
  if (mask_padding) zero_beyond(ctx, x, lengths);
  return result;
}

// The forced `feature` values as an F32 [B, rows] tensor on ctx's device (0 at padded rows, as
// the prediction is there), or an undefined tensor when `forced` is empty. Throws
// voxd::InputError naming the list or value when there is not one list per sequence, a list is
// not lengths[b] long (`unit`: what a value stands for), or a value is not finite.
Tensor forced_feature(Context& ctx, const std::vector<std::vector<float>>& forced,
                      const std::vector<int64_t>& lengths, int64_t rows, const char* feature,
                      const char* unit) {
  if (forced.empty()) return Tensor();
  const std::string what = "FastSpeech2: ";
  if (forced.size() != lengths.size()) {
    throw InputError(what + std::to_string(forced.size()) + " forced " + feature + " lists for " +
                     std::to_string(lengths.size()) + " sequences");
  }
  std::vector<float> padded(static_cast<size_t>(static_cast<int64_t>(lengths.size()) * rows), 0.0f);
  for (size_t b = 0; b < forced.size(); ++b) {
    const std::vector<float>& values = forced[b];
    if (static_cast<int64_t>(values.size()) != lengths[b]) {
      throw InputError(what + std::to_string(values.size()) + " forced " + feature +
                       " values for sequence " + std::to_string(b) + " of " +
                       std::to_string(lengths[b]) + " " + unit);
    }
    for (size_t t = 0; t < values.size(); ++t) {
      if (!std::isfinite(values[t])) {
        throw InputError(what + "forced " + feature + " value " + std::to_string(values[t]) +
                         " at position " + std::to_string(t) + " of sequence " + std::to_string(b) +
                         " is not finite");
      }
    }
    std::copy(values.begin(), values.end(), padded.begin() + static_cast<int64_t>(b) * rows);
  }
  return ops::to_device(
      ctx, Tensor::from_vector({static_cast<int64_t>(lengths.size()), rows}, padded), DType::F32);
}

// ---------------------------------------------------------------------------------------------
// Config parsing.

using nlohmann::json;

const json& field(const json& j, const char* key, const std::string& where, const std::string& path,
                  const char* expected) {
  if (!j.is_object() || !j.contains(key)) {
    throw InputError(where + ": missing field '" + path + "' (expected " + expected + ")");
  }
  return j.at(key);
}

int64_t positive_int(const json& j, const char* key, const std::string& where,
                     const std::string& path) {
  const json& v = field(j, key, where, path, "a positive integer");
  if (!v.is_number_integer() || v.get<int64_t>() <= 0) {
    throw InputError(where + ": field '" + path + "' must be a positive integer, got " + v.dump());
  }
  return v.get<int64_t>();
}

FeatureLevel feature_level(const json& j, const char* key, const std::string& where) {
  const json& v = field(j, key, where, key, "\"phoneme_level\" or \"frame_level\"");
  if (v == "phoneme_level") return FeatureLevel::Phoneme;
  if (v == "frame_level") return FeatureLevel::Frame;
  throw InputError(where + ": field '" + key +
                   "' must be \"phoneme_level\" or \"frame_level\", got " + v.dump());
}

Quantization quantization(const json& j, const char* key, const std::string& where,
                          const std::string& path) {
  const json& v = field(j, key, where, path, "\"linear\" or \"log\"");
  if (v == "linear") return Quantization::Linear;
  if (v == "log") return Quantization::Log;
  throw InputError(where + ": field '" + path + "' must be \"linear\" or \"log\", got " + v.dump());
}

std::array<double, 4> stats_entry(const json& stats, const char* key, const std::string& where) {
  const std::string path = std::string("stats.") + key;
  const json& v = field(stats, key, where, path, "[min, max, mean, std]");
  if (!v.is_array() || v.size() < 2 || v.size() > 4 ||
      !std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_number(); })) {
    throw InputError(where + ": field '" + path +
                     "' must be a list of 2 to 4 numbers [min, max, mean, std], got " + v.dump());
  }
  std::array<double, 4> out{0.0, 0.0, 0.0, 1.0};
  for (size_t i = 0; i < v.size(); ++i) out[i] = v[i].get<double>();
  return out;
}

void require_positive(int64_t value, const std::string& where, const std::string& path) {
  if (value <= 0) {
    throw InputError(where + ": field '" + path + "' must be a positive integer, got " +
                     std::to_string(value));
  }
}

// ---------------------------------------------------------------------------------------------
// Loading.

// One model's loader: the source, the device context and the precision policy. Matrix weights
// load in its compute dtype, the others in its stream dtype.
struct Loader {
  Context& ctx;
  const WeightSource& source;
  PrecisionPolicy precision;

  Tensor param(const std::string& name, const Shape& shape, DType dtype) const {
    return load_parameter(ctx, source, name, shape, dtype);
  }
  // A matrix op's weights, or the stream-dtype output head of a predictor.
  LinearWeights linear(const std::string& prefix, int64_t out, int64_t in, DType dtype) const {
    return {param(prefix + ".weight", {out, in}, dtype), param(prefix + ".bias", {out}, dtype)};
  }
  ConvWeights conv(const std::string& prefix, int64_t out, int64_t in, int64_t kernel,
                   int64_t padding) const {
    const DType dtype = precision.compute;
    return arranged_conv(param(prefix + ".weight", {out, in, kernel}, dtype),
                         param(prefix + ".bias", {out}, dtype), padding);
  }
  // A convolution over rows, its weight in the order the backend reads it, made once here; the
  // weight as loaded is then dropped where the arrangement holds it as a view (on CUDA).
  ConvWeights arranged_conv(const Tensor& weight, Tensor bias, int64_t padding) const {
    const Conv1dParams params{.padding = padding};
    Tensor arranged = ops::arrange_conv1d_rows_weight(ctx, weight, params);
    return {ops::conv1d_rows_weight_view(ctx, arranged, weight, params), std::move(bias), padding,
            std::move(arranged)};
  }
  NormWeights norm(const std::string& prefix, int64_t width) const {
    const DType dtype = precision.stream;
    return {param(prefix + ".weight", {width}, dtype), param(prefix + ".bias", {width}, dtype)};
  }
  Shape shape_of(const std::string& name, int64_t rank, const char* expected) const {
    return parameter_shape(source, name, rank, expected);
  }

  FftBlockWeights fft_block(const std::string& prefix, int64_t hidden, int64_t heads,
                            const FastSpeech2Config& c) const {
    FftBlockWeights w;
    const int64_t head_dim = hidden / heads;
    const int64_t inner = heads * head_dim;
    const std::string attn = prefix + ".slf_attn";
    w.attention.q = linear(attn + ".w_qs", inner, hidden, precision.compute);
    w.attention.k = linear(attn + ".w_ks", inner, hidden, precision.compute);
    w.attention.v = linear(attn + ".w_vs", inner, hidden, precision.compute);
    w.attention.fc = linear(attn + ".fc", hidden, inner, precision.compute);
    w.attention.heads = heads;
    w.attention.head_dim = head_dim;
    w.attention_norm = norm(attn + ".layer_norm", hidden);
    const std::string ffn = prefix + ".pos_ffn";
    const auto [k0, k1] = c.conv_kernel_size;
    w.ffn.w1 = conv(ffn + ".w_1", c.conv_filter_size, hidden, k0, (k0 - 1) / 2);
    w.ffn.w2 = conv(ffn + ".w_2", hidden, c.conv_filter_size, k1, (k1 - 1) / 2);
    w.ffn_norm = norm(ffn + ".layer_norm", hidden);
    return w;
  }

  PredictorWeights predictor(const std::string& prefix, const FastSpeech2Config& c) const {
    const int64_t f = c.variance_filter_size;
    const int64_t k = c.variance_kernel_size;
    const std::string layers = prefix + ".conv_layer";
    PredictorWeights w;
    w.conv1 = conv(layers + ".conv1d_1.conv", f, c.encoder_hidden, k, (k - 1) / 2);
    w.norm1 = norm(layers + ".layer_norm_1", f);
    w.conv2 = conv(layers + ".conv1d_2.conv", f, f, k, 1);  // padding=1 in the original
    w.norm2 = norm(layers + ".layer_norm_2", f);
    w.linear = linear(prefix + ".linear_layer", 1, f, precision.stream);
    return w;
  }

  VarianceWeights variance(const std::string& name, const FastSpeech2Config& c) const {
    VarianceWeights w;
    w.predictor = predictor("variance_adaptor." + name + "_predictor", c);
    const std::string bins_name = "variance_adaptor." + name + "_bins";
    const Tensor bins = load_host_parameter(source, bins_name, {c.n_bins - 1});
    const std::vector<float> values = bins.to_float_vector();
    for (size_t i = 1; i < values.size(); ++i) {
      if (!(values[i - 1] <= values[i])) {
        throw Error(source.describe() + ": tensor '" + bins_name +
                    "' must be ascending (torch.bucketize boundaries), but element " +
                    std::to_string(i) + " is smaller than the one before");
      }
    }
    w.bins = ops::to_device(ctx, bins, DType::F32);
    w.table = param("variance_adaptor." + name + "_embedding.weight", {c.n_bins, c.encoder_hidden},
                    precision.stream);
    return w;
  }

  // postnet.convolutions.N: ConvNorm then BatchNorm1d (eval: running statistics), folded into
  // one conv: w' = w · s, b' = (b − mean) · s + beta with s = gamma / sqrt(var + eps).
  ConvWeights postnet_conv(const std::string& prefix, int64_t out, int64_t in,
                           int64_t kernel) const {
    const Tensor w = load_host_parameter(source, prefix + ".0.conv.weight", {out, in, kernel})
                         .to_host_contiguous(DType::F32);
    const std::vector<float> bias =
        load_host_parameter(source, prefix + ".0.conv.bias", {out}).to_float_vector();
    const std::vector<float> gamma =
        load_host_parameter(source, prefix + ".1.weight", {out}).to_float_vector();
    const std::vector<float> beta =
        load_host_parameter(source, prefix + ".1.bias", {out}).to_float_vector();
    const std::vector<float> mean =
        load_host_parameter(source, prefix + ".1.running_mean", {out}).to_float_vector();
    const std::vector<float> var =
        load_host_parameter(source, prefix + ".1.running_var", {out}).to_float_vector();
    std::vector<float> folded_w(static_cast<size_t>(out * in * kernel));
    std::vector<float> folded_b(static_cast<size_t>(out));
    const float* src = w.data<float>();
    for (int64_t o = 0; o < out; ++o) {
      const auto so = static_cast<size_t>(o);
      const double s = gamma[so] / std::sqrt(static_cast<double>(var[so]) + kBatchNormEps);
      for (int64_t i = 0; i < in * kernel; ++i) {
        const auto at = static_cast<size_t>(o * in * kernel + i);
        folded_w[at] = static_cast<float>(src[at] * s);
      }
      folded_b[so] = static_cast<float>((static_cast<double>(bias[so]) - mean[so]) * s + beta[so]);
    }
    const DType dtype = precision.compute;
    return arranged_conv(
        ops::to_device(ctx, Tensor::from_vector({out, in, kernel}, folded_w), dtype),
        ops::to_device(ctx, Tensor::from_vector({out}, folded_b), dtype), (kernel - 1) / 2);
  }

  // The postnet's sizes come from its weights (the original hard-codes 512 channels, kernel 5
  // and 5 convs): N convs n_mels -> E -> ... -> E -> n_mels, N >= 2, odd kernel K.
  std::vector<ConvWeights> postnet(int64_t n_mels) const {
    const std::string first = "postnet.convolutions.0.0.conv.weight";
    const Shape s = shape_of(first, 3, "[channels, n_mels, kernel]");
    const int64_t channels = s[0];
    const int64_t kernel = s[2];
    if (kernel % 2 == 0) {
      throw Error(source.describe() + ": tensor '" + first + "' has an even kernel (" +
                  std::to_string(kernel) + "); the postnet's convs must keep the length");
    }
    int64_t count = 0;
    while (source.contains("postnet.convolutions." + std::to_string(count) + ".0.conv.weight")) {
      ++count;
    }
    if (count < 2) {
      throw Error(source.describe() + ": missing tensor 'postnet.convolutions.1.0.conv.weight'" +
                  " (the postnet has at least two convs)");
    }
    std::vector<ConvWeights> convs;
    for (int64_t i = 0; i < count; ++i) {
      const int64_t in = i == 0 ? n_mels : channels;
      const int64_t out = i == count - 1 ? n_mels : channels;
      convs.push_back(postnet_conv("postnet.convolutions." + std::to_string(i), out, in, kernel));
    }
    return convs;
  }
};

void require_masked_padding(const SynthesisControls& controls) {
  if (controls.pad_to_phonemes < 0 || controls.pad_to_frames < 0) {
    throw InputError("FastSpeech2: pad_to_phonemes (" + std::to_string(controls.pad_to_phonemes) +
                     ") and pad_to_frames (" + std::to_string(controls.pad_to_frames) +
                     ") must not be negative");
  }
  if ((controls.pad_to_phonemes > 0 || controls.pad_to_frames > 0) && !controls.mask_padding) {
    throw InputError(
        "FastSpeech2: padding to pad_to_phonemes or pad_to_frames needs mask_padding, which keeps "
        "the padding out of the sequences' output");
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------

FastSpeech2Config FastSpeech2Config::from_json(const json& j, const std::string& where) {
  if (!j.is_object()) throw InputError(where + ": expected a JSON object, got " + j.dump());
  FastSpeech2Config c;
  const json& model = field(j, "model", where, "model", "ming024's model.yaml as an object");
  const json& t = field(model, "transformer", where, "model.transformer", "an object");
  const std::string tp = "model.transformer.";
  c.encoder_layers = positive_int(t, "encoder_layer", where, tp + "encoder_layer");
  c.encoder_heads = positive_int(t, "encoder_head", where, tp + "encoder_head");
  c.encoder_hidden = positive_int(t, "encoder_hidden", where, tp + "encoder_hidden");
  c.decoder_layers = positive_int(t, "decoder_layer", where, tp + "decoder_layer");
  c.decoder_heads = positive_int(t, "decoder_head", where, tp + "decoder_head");
  c.decoder_hidden = positive_int(t, "decoder_hidden", where, tp + "decoder_hidden");
  c.conv_filter_size = positive_int(t, "conv_filter_size", where, tp + "conv_filter_size");
  const json& kernels =
      field(t, "conv_kernel_size", where, tp + "conv_kernel_size", "two positive integers");
  if (!kernels.is_array() || kernels.size() != 2) {
    throw InputError(where + ": field '" + tp +
                     "conv_kernel_size' must be a list of two positive integers, got " +
                     kernels.dump());
  }
  for (size_t i = 0; i < 2; ++i) {
    const std::string path = tp + "conv_kernel_size[" + std::to_string(i) + "]";
    if (!kernels[i].is_number_integer() || kernels[i].get<int64_t>() <= 0) {
      throw InputError(where + ": field '" + path + "' must be a positive integer, got " +
                       kernels[i].dump());
    }
    c.conv_kernel_size[i] = kernels[i].get<int64_t>();
  }
  const json& vp =
      field(model, "variance_predictor", where, "model.variance_predictor", "an object");
  c.variance_filter_size =
      positive_int(vp, "filter_size", where, "model.variance_predictor.filter_size");
  c.variance_kernel_size =
      positive_int(vp, "kernel_size", where, "model.variance_predictor.kernel_size");
  const json& ve =
      field(model, "variance_embedding", where, "model.variance_embedding", "an object");
  c.pitch_quantization =
      quantization(ve, "pitch_quantization", where, "model.variance_embedding.pitch_quantization");
  c.energy_quantization = quantization(ve, "energy_quantization", where,
                                       "model.variance_embedding.energy_quantization");
  c.n_bins = positive_int(ve, "n_bins", where, "model.variance_embedding.n_bins");
  const json& ms = field(model, "multi_speaker", where, "model.multi_speaker", "true or false");
  if (!ms.is_boolean()) {
    throw InputError(where + ": field 'model.multi_speaker' must be true or false, got " +
                     ms.dump());
  }
  c.multi_speaker = ms.get<bool>();
  c.max_seq_len = positive_int(model, "max_seq_len", where, "model.max_seq_len");
  c.pitch_feature_level = feature_level(j, "pitch_feature_level", where);
  c.energy_feature_level = feature_level(j, "energy_feature_level", where);
  if (j.contains("stats")) {
    const json& stats = j.at("stats");
    if (!stats.is_object()) {
      throw InputError(where + ": field 'stats' must be an object with \"pitch\" and " +
                       "\"energy\", got " + stats.dump());
    }
    c.pitch_stats = stats_entry(stats, "pitch", where);
    c.energy_stats = stats_entry(stats, "energy", where);
  }
  c.validate(where);
  return c;
}

void FastSpeech2Config::validate(const std::string& where) const {
  const std::string tp = "model.transformer.";
  require_positive(encoder_layers, where, tp + "encoder_layer");
  require_positive(encoder_heads, where, tp + "encoder_head");
  require_positive(encoder_hidden, where, tp + "encoder_hidden");
  require_positive(decoder_layers, where, tp + "decoder_layer");
  require_positive(decoder_heads, where, tp + "decoder_head");
  require_positive(decoder_hidden, where, tp + "decoder_hidden");
  require_positive(conv_filter_size, where, tp + "conv_filter_size");
  require_positive(variance_filter_size, where, "model.variance_predictor.filter_size");
  require_positive(max_seq_len, where, "model.max_seq_len");
  require_positive(n_mels, where, "n_mels");
  if (encoder_heads > encoder_hidden || decoder_heads > decoder_hidden) {
    throw InputError(where + ": fields '" + tp + "encoder_head'/'decoder_head' must not exceed " +
                     "the hidden sizes (d_k = hidden / heads would be 0)");
  }
  if (encoder_hidden != decoder_hidden) {
    throw InputError(where + ": fields '" + tp + "encoder_hidden' (" +
                     std::to_string(encoder_hidden) + ") and '" + tp + "decoder_hidden' (" +
                     std::to_string(decoder_hidden) +
                     ") must be equal: the decoder adds its position table to the encoder's rows");
  }
  for (size_t i = 0; i < 2; ++i) {
    if (conv_kernel_size[i] <= 0 || conv_kernel_size[i] % 2 == 0) {
      throw InputError(where + ": field '" + tp + "conv_kernel_size[" + std::to_string(i) +
                       "]' must be a positive odd integer (padding (k − 1) / 2 keeps the length" +
                       " only for odd k), got " + std::to_string(conv_kernel_size[i]));
    }
  }
  if (variance_kernel_size != 3) {
    throw InputError(where + ": field 'model.variance_predictor.kernel_size' must be 3, got " +
                     std::to_string(variance_kernel_size) +
                     " (ming024's VariancePredictor pads its second conv by 1, so any other " +
                     "kernel changes the length and the original fails)");
  }
  if (n_bins < 2) {
    throw InputError(where + ": field 'model.variance_embedding.n_bins' must be at least 2, got " +
                     std::to_string(n_bins));
  }
  if (n_speakers < 0) {
    throw InputError(where + ": n_speakers must not be negative, got " +
                     std::to_string(n_speakers));
  }
  const auto check_stats = [&](const std::optional<std::array<double, 4>>& stats, Quantization q,
                               const char* name) {
    if (!stats) return;
    const double lo = (*stats)[0];
    const double hi = (*stats)[1];
    if (!(lo < hi)) {
      throw InputError(where + ": field 'stats." + name + "' must have min < max, got [" +
                       std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    if (q == Quantization::Log && !(lo > 0.0)) {
      throw InputError(where + ": field 'stats." + name +
                       "' must have min > 0 for log quantization, got " + std::to_string(lo));
    }
  };
  check_stats(pitch_stats, pitch_quantization, "pitch");
  check_stats(energy_stats, energy_quantization, "energy");
}

FastSpeech2 FastSpeech2::load(Context& ctx, const FastSpeech2Config& config,
                              const WeightSource& weights, DType dtype) {
  config.validate("FastSpeech2 config");
  const PrecisionPolicy precision = PrecisionPolicy::for_weights(dtype);
  const Loader l{ctx, weights, precision};
  const DType stream = precision.stream;
  auto w = std::make_shared<Weights>();
  w->precision = precision;
  const int64_t hidden = config.encoder_hidden;

  const std::string emb_name = "encoder.src_word_emb.weight";
  w->n_symbols = l.shape_of(emb_name, 2, "[n_symbols, encoder_hidden]")[0];
  w->src_word_emb = l.param(emb_name, {w->n_symbols, hidden}, stream);
  w->encoder_position =
      l.param("encoder.position_enc", {1, config.max_seq_len + 1, hidden}, stream);
  for (int64_t i = 0; i < config.encoder_layers; ++i) {
    w->encoder.push_back(l.fft_block("encoder.layer_stack." + std::to_string(i), hidden,
                                     config.encoder_heads, config));
  }
  if (config.multi_speaker) {
    const std::string name = "speaker_emb.weight";
    w->n_speakers = config.n_speakers > 0 ? config.n_speakers
                                          : l.shape_of(name, 2, "[n_speakers, encoder_hidden]")[0];
    w->speaker_emb = l.param(name, {w->n_speakers, hidden}, stream);
  }
  w->duration = l.predictor("variance_adaptor.duration_predictor", config);
  w->pitch = l.variance("pitch", config);
  w->energy = l.variance("energy", config);
  const int64_t dec = config.decoder_hidden;
  w->decoder_position = l.param("decoder.position_enc", {1, config.max_seq_len + 1, dec}, stream);
  for (int64_t i = 0; i < config.decoder_layers; ++i) {
    w->decoder.push_back(
        l.fft_block("decoder.layer_stack." + std::to_string(i), dec, config.decoder_heads, config));
  }
  w->mel_linear = l.linear("mel_linear", config.n_mels, dec, precision.compute);
  w->postnet = l.postnet(config.n_mels);
  return FastSpeech2(config, std::move(w));
}

int64_t FastSpeech2::n_symbols() const {
  return weights_->n_symbols;
}

int64_t FastSpeech2::n_speakers() const {
  return weights_->n_speakers;
}

DType FastSpeech2::hidden_dtype() const {
  return weights_->precision.stream;
}

AcousticOutput FastSpeech2::forward(Context& ctx, const std::vector<std::vector<int64_t>>& ids,
                                    const std::vector<int64_t>& speakers,
                                    const SynthesisControls& controls, FastSpeech2Debug* debug,
                                    const std::vector<std::vector<int64_t>>& forced_durations,
                                    const ForcedFeatures& forced_features) const {
  return decode(ctx, encode(ctx, ids, speakers, controls, debug, forced_durations, forced_features),
                controls, debug, forced_features);
}

namespace {

// What encode() runs on the device, from x [B, T, C] (the embedded symbols) and speaker_rows
// [B, 1, C] (each sequence's speaker embedding; undefined for a single-speaker model).
struct EncoderResult {
  Tensor hidden;         // [B, T, C]: x after the encoder, speaker, pitch and energy
  Tensor log_durations;  // [B, T], 0 at padded rows
  VarianceResult pitch, energy;
};

EncoderResult run_encoder(Context& ctx, const FastSpeech2::Weights& w, const FastSpeech2Config& c,
                          Tensor x, const Tensor& speaker_rows, const Lengths& lengths,
                          const SynthesisControls& controls, const Tensor& forced_pitch,
                          const Tensor& forced_energy) {
  add_positions(ctx, x, w.encoder_position, c.max_seq_len);
  for (const FftBlockWeights& layer : w.encoder) {
    x = fft_block(ctx, x, layer, lengths, w.precision);
  }
  if (speaker_rows.defined()) {
    ops::add_(ctx, x, speaker_rows);
    if (controls.mask_padding) zero_beyond(ctx, x, lengths);
  }
  EncoderResult result;
  result.log_durations = predict(ctx, x, w.duration, lengths, w.precision, controls.mask_padding);
  if (c.pitch_feature_level == FeatureLevel::Phoneme) {
    result.pitch = add_variance(ctx, x, w.pitch, lengths, controls.pitch_scale, w.precision,
                                forced_pitch, controls.mask_padding);
  }
  if (c.energy_feature_level == FeatureLevel::Phoneme) {
    result.energy = add_variance(ctx, x, w.energy, lengths, controls.pitch_scale, w.precision,
                                 forced_energy, controls.mask_padding);
  }
  result.hidden = x;
  return result;
}

// What decode() runs on the device after the length regulator, from x [B, T_mel, C]: the
// frame-level variance, the decoder and the postnet. Returns the mel; debug, when given, gets the
// frame-level predictions and mel_before_postnet.
Tensor run_decoder(Context& ctx, const FastSpeech2::Weights& w, const FastSpeech2Config& c,
                   Tensor x, const Lengths& mel_lengths, const SynthesisControls& controls,
                   const Tensor& forced_pitch, const Tensor& forced_energy,
                   FastSpeech2Debug* debug) {
  if (c.pitch_feature_level == FeatureLevel::Frame) {
    const VarianceResult pitch = add_variance(ctx, x, w.pitch, mel_lengths, controls.pitch_scale,
                                              w.precision, forced_pitch, controls.mask_padding);
    if (debug) {
      debug->pitch = pitch.prediction;
      debug->pitch_buckets = pitch.buckets;
    }
  }
  if (c.energy_feature_level == FeatureLevel::Frame) {
    const VarianceResult energy = add_variance(ctx, x, w.energy, mel_lengths, controls.pitch_scale,
                                               w.precision, forced_energy, controls.mask_padding);
    if (debug) {
      debug->energy = energy.prediction;
      debug->energy_buckets = energy.buckets;
    }
  }

  // Decoder, mel_linear, postnet: the matrix work in the compute dtype, the mel and the postnet's
  // residual sum in the stream dtype.
  add_positions(ctx, x, w.decoder_position, c.max_seq_len);
  for (const FftBlockWeights& layer : w.decoder) {
    x = fft_block(ctx, x, layer, mel_lengths, w.precision);
  }
  Tensor mel =
      ops::linear(ctx, w.precision.to_compute(ctx, x), w.mel_linear.weight, w.mel_linear.bias);
  x = Tensor();
  // With mask_padding the postnet's convs see zeros past each length, as they do alone.
  if (controls.mask_padding) zero_beyond(ctx, mel, mel_lengths);
  Tensor post;
  {
    Tensor h = mel;
    for (size_t i = 0; i < w.postnet.size(); ++i) {
      h = conv_rows(ctx, h, w.postnet[i]);
      if (i + 1 < w.postnet.size()) {
        h = ops::tanh(ctx, h);
        if (controls.mask_padding) zero_beyond(ctx, h, mel_lengths);
      }
    }
    post = w.precision.to_stream(ctx, h);
  }
  mel = w.precision.to_stream(ctx, mel);
  ops::add_(ctx, post, mel);
  if (debug) debug->mel_before_postnet = mel;
  return post;
}

// The forced pitch and energy of the features predicted at `level` as forced_feature makes them
// for sequences of `lengths` padded to `rows`; undefined for a feature at the other level or
// not forced.
std::pair<Tensor, Tensor> forced_at(Context& ctx, const FastSpeech2Config& c, FeatureLevel level,
                                    const ForcedFeatures& forced,
                                    const std::vector<int64_t>& lengths, int64_t rows) {
  const char* unit = level == FeatureLevel::Phoneme ? "symbols" : "frames";
  return {c.pitch_feature_level == level
              ? forced_feature(ctx, forced.pitch, lengths, rows, "pitch", unit)
              : Tensor(),
          c.energy_feature_level == level
              ? forced_feature(ctx, forced.energy, lengths, rows, "energy", unit)
              : Tensor()};
}

// clamp(round(exp(log_d) − 1) · scale, min 0): the duration predictor's frames for a symbol
// before int(). torch.round rounds half to even, as nearbyint in the default rounding mode.
float rounded_duration(float log_d, float scale) {
  return std::max(std::nearbyint(std::exp(log_d) - 1.0f) * scale, 0.0f);
}

// A per-sequence I64 tensor an on-device step reads: contiguous [batch], on ctx's device or the
// host. Throws voxd::InputError naming `what`.
void require_step_lengths(Context& ctx, const Tensor& values, int64_t batch, const char* what) {
  if (!values.defined() || values.dtype() != DType::I64 || values.shape() != Shape{batch} ||
      !values.is_contiguous() || !(values.device().is_cpu() || values.device() == ctx.device())) {
    throw InputError(
        std::string("FastSpeech2: ") + what + " must be contiguous I64 [" + std::to_string(batch) +
        "] on the host or " + ctx.device().to_string() + ", got " +
        (values.defined() ? std::string(dtype_name(values.dtype())) + " " + values.shape_string() +
                                " on " + values.device().to_string()
                          : std::string("nothing")));
  }
}

}  // namespace

std::vector<int64_t> FastSpeech2::check_sequences(
    const std::vector<std::vector<int64_t>>& ids, const std::vector<int64_t>& speakers,
    const std::vector<std::vector<int64_t>>& forced_durations) const {
  const Weights& w = *weights_;
  const auto batch = static_cast<int64_t>(ids.size());
  if (batch == 0) throw InputError("FastSpeech2: no sequences given");
  if (!speakers.empty() && speakers.size() != ids.size()) {
    throw InputError("FastSpeech2: " + std::to_string(speakers.size()) + " speakers for " +
                     std::to_string(batch) + " sequences");
  }
  std::vector<int64_t> src_lens;
  for (int64_t b = 0; b < batch; ++b) {
    const auto& seq = ids[static_cast<size_t>(b)];
    if (seq.empty()) throw InputError("FastSpeech2: sequence " + std::to_string(b) + " is empty");
    for (size_t t = 0; t < seq.size(); ++t) {
      if (seq[t] < 0 || seq[t] >= w.n_symbols) {
        throw InputError("FastSpeech2: symbol id " + std::to_string(seq[t]) + " at position " +
                         std::to_string(t) + " of sequence " + std::to_string(b) +
                         " is outside [0, " + std::to_string(w.n_symbols) + ")");
      }
    }
    src_lens.push_back(static_cast<int64_t>(seq.size()));
  }
  for (size_t b = 0; b < speakers.size(); ++b) {
    if (speakers[b] < 0 || speakers[b] >= w.n_speakers) {
      throw InputError("FastSpeech2: speaker id " + std::to_string(speakers[b]) + " of sequence " +
                       std::to_string(b) + " is outside [0, " + std::to_string(w.n_speakers) + ")");
    }
  }
  if (!forced_durations.empty()) {
    if (forced_durations.size() != ids.size()) {
      throw InputError("FastSpeech2: " + std::to_string(forced_durations.size()) +
                       " forced duration lists for " + std::to_string(batch) + " sequences");
    }
    for (size_t b = 0; b < ids.size(); ++b) {
      if (forced_durations[b].size() != ids[b].size()) {
        throw InputError("FastSpeech2: " + std::to_string(forced_durations[b].size()) +
                         " forced durations for sequence " + std::to_string(b) + " of " +
                         std::to_string(ids[b].size()) + " symbols");
      }
      for (size_t t = 0; t < ids[b].size(); ++t) {
        if (forced_durations[b][t] < 0) {
          throw InputError("FastSpeech2: forced duration " +
                           std::to_string(forced_durations[b][t]) + " at position " +
                           std::to_string(t) + " of sequence " + std::to_string(b) +
                           " is negative");
        }
      }
    }
  }
  return src_lens;
}

AcousticEncoding FastSpeech2::durations_from(const Tensor& log_durations,
                                             const std::vector<int64_t>& lengths,
                                             const SynthesisControls& controls,
                                             std::vector<std::vector<float>>* rounded) const {
  const auto batch = static_cast<int64_t>(lengths.size());
  if (!log_durations.defined() || !log_durations.device().is_cpu() || log_durations.dim() != 2 ||
      log_durations.size(0) != batch) {
    throw Error(
        "FastSpeech2::durations_from: log durations " +
        (log_durations.defined() ? log_durations.shape_string() : std::string("undefined")) +
        " must be a host tensor [" + std::to_string(batch) + ", T]");
  }
  const int64_t stride = log_durations.size(1);
  const std::vector<float> log_values = log_durations.to_float_vector();
  AcousticEncoding result;
  if (rounded) rounded->assign(static_cast<size_t>(batch), {});
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t length = lengths[static_cast<size_t>(b)];
    if (length < 0 || length > stride) {
      throw Error("FastSpeech2::durations_from: length " + std::to_string(length) +
                  " of sequence " + std::to_string(b) + " outside [0, " + std::to_string(stride) +
                  "]");
    }
    std::vector<int64_t> frames;
    int64_t total = 0;
    for (int64_t t = 0; t < length; ++t) {
      const float d = rounded_duration(log_values[static_cast<size_t>(b * stride + t)],
                                       controls.duration_scale);
      if (rounded) (*rounded)[static_cast<size_t>(b)].push_back(d);
      if (!std::isfinite(d) || d > 1e9f) {
        throw Error("FastSpeech2: the duration predicted for symbol " + std::to_string(t) +
                    " of sequence " + std::to_string(b) + " is not a usable frame count (" +
                    std::to_string(d) + ")");
      }
      frames.push_back(static_cast<int64_t>(d));  // int() truncates
      total += frames.back();
    }
    result.durations.push_back(std::move(frames));
    result.mel_lengths.push_back(total);
  }
  result.src_lengths = lengths;
  return result;
}

AcousticEncoding FastSpeech2::with_durations(std::vector<int64_t> lengths,
                                             std::vector<std::vector<int64_t>> durations) {
  AcousticEncoding result;
  for (const auto& frames : durations) {
    int64_t total = 0;
    for (const int64_t f : frames) total += f;
    result.mel_lengths.push_back(total);
  }
  result.src_lengths = std::move(lengths);
  result.durations = std::move(durations);
  return result;
}

AcousticEncoding FastSpeech2::encode(Context& ctx, const std::vector<std::vector<int64_t>>& ids,
                                     const std::vector<int64_t>& speakers,
                                     const SynthesisControls& controls, FastSpeech2Debug* debug,
                                     const std::vector<std::vector<int64_t>>& forced_durations,
                                     const ForcedFeatures& forced_features) const {
  const Weights& w = *weights_;
  const FastSpeech2Config& c = config_;
  const std::vector<int64_t> src_lens = check_sequences(ids, speakers, forced_durations);
  const auto batch = static_cast<int64_t>(ids.size());
  require_masked_padding(controls);
  const int64_t max_src =
      std::max(*std::max_element(src_lens.begin(), src_lens.end()), controls.pad_to_phonemes);

  // The symbols padded with id 0, each sequence's speaker, and the forced phoneme-level values.
  Tensor x;
  {
    std::vector<int64_t> padded(static_cast<size_t>(batch * max_src), 0);
    for (int64_t b = 0; b < batch; ++b) {
      const auto& seq = ids[static_cast<size_t>(b)];
      std::copy(seq.begin(), seq.end(), padded.begin() + b * max_src);
    }
    x = ops::embedding(ctx, Tensor::from_vector({batch, max_src}, padded), w.src_word_emb);
  }
  Tensor speaker_rows;
  if (w.speaker_emb.defined()) {
    std::vector<int64_t> ids_per_row = speakers;
    ids_per_row.resize(static_cast<size_t>(batch), 0);
    speaker_rows = ops::embedding(ctx, Tensor::from_vector({batch, 1}, ids_per_row), w.speaker_emb);
  }
  const auto [forced_pitch, forced_energy] =
      forced_at(ctx, c, FeatureLevel::Phoneme, forced_features, src_lens, max_src);
  const EncoderResult encoded = run_encoder(ctx, w, c, x, speaker_rows, Lengths{src_lens, {}},
                                            controls, forced_pitch, forced_energy);

  std::vector<std::vector<float>> rounded;
  AcousticEncoding result;
  if (forced_durations.empty()) {
    result = durations_from(ops::to_host(ctx, encoded.log_durations), src_lens, controls, &rounded);
  } else {
    // The predicted durations are reported in debug only; the forced ones are used.
    if (debug) {
      const std::vector<float> log_values =
          ops::to_host(ctx, encoded.log_durations).to_float_vector();
      rounded.resize(static_cast<size_t>(batch));
      for (int64_t b = 0; b < batch; ++b) {
        for (int64_t t = 0; t < src_lens[static_cast<size_t>(b)]; ++t) {
          rounded[static_cast<size_t>(b)].push_back(rounded_duration(
              log_values[static_cast<size_t>(b * max_src + t)], controls.duration_scale));
        }
      }
    }
    result = with_durations(src_lens, forced_durations);
  }
  if (debug) {
    debug->log_durations = encoded.log_durations;
    debug->rounded_durations = rounded;
    debug->pitch = encoded.pitch.prediction;
    debug->pitch_buckets = encoded.pitch.buckets;
    debug->energy = encoded.energy.prediction;
    debug->energy_buckets = encoded.energy.buckets;
  }
  result.hidden = encoded.hidden;
  return result;
}

AcousticOutput FastSpeech2::decode(Context& ctx, const AcousticEncoding& encoding,
                                   const SynthesisControls& controls, FastSpeech2Debug* debug,
                                   const ForcedFeatures& forced_features) const {
  const Weights& w = *weights_;
  const FastSpeech2Config& c = config_;
  const Tensor& hidden = encoding.hidden;
  if (!hidden.defined() || hidden.dim() != 3 || hidden.size(2) != c.encoder_hidden) {
    throw Error("FastSpeech2::decode: the encoding's hidden states are " +
                (hidden.defined() ? hidden.shape_string() : std::string("undefined")) +
                ", expected [B, T, " + std::to_string(c.encoder_hidden) + "] from encode()");
  }
  const int64_t batch = hidden.size(0);
  for (const size_t count :
       {encoding.src_lengths.size(), encoding.durations.size(), encoding.mel_lengths.size()}) {
    if (static_cast<int64_t>(count) != batch) {
      throw Error("FastSpeech2::decode: the encoding has " + std::to_string(count) +
                  " entries in a per-sequence list for hidden states " + hidden.shape_string() +
                  "; pass what encode() returned");
    }
  }
  AcousticOutput result;
  result.durations = encoding.durations;
  result.mel_lengths = encoding.mel_lengths;
  const std::vector<int64_t>& mel_lens = result.mel_lengths;
  require_masked_padding(controls);
  const int64_t longest_mel = *std::max_element(mel_lens.begin(), mel_lens.end());
  if (longest_mel == 0) {
    result.mel = ops::zeros(ctx, {batch, 0, c.n_mels}, w.precision.stream);
    if (debug) debug->mel_before_postnet = result.mel;
    return result;
  }

  const int64_t max_mel = std::max(longest_mel, controls.pad_to_frames);
  const auto [forced_pitch, forced_energy] =
      forced_at(ctx, c, FeatureLevel::Frame, forced_features, mel_lens, max_mel);
  result.mel = run_decoder(ctx, w, c, ops::length_regulate(ctx, hidden, result.durations, max_mel),
                           Lengths{mel_lens, {}}, controls, forced_pitch, forced_energy, debug);
  return result;
}

DeviceEncoding FastSpeech2::encode_on_device(Context& ctx, const Tensor& ids, const Tensor& lengths,
                                             const Tensor& speakers,
                                             const SynthesisControls& controls) const {
  const Weights& w = *weights_;
  const FastSpeech2Config& c = config_;
  if (!ids.defined() || ids.dtype() != DType::I64 || ids.dim() != 2 || !ids.is_contiguous() ||
      !(ids.device().is_cpu() || ids.device() == ctx.device())) {
    throw InputError(
        "FastSpeech2::encode_on_device: ids must be contiguous I64 [B, T] on the host or " +
        ctx.device().to_string() + ", got " +
        (ids.defined() ? ids.shape_string() : std::string("nothing")));
  }
  const int64_t batch = ids.size(0);
  const int64_t t = ids.size(1);
  require_step_lengths(ctx, lengths, batch, "lengths");
  if (w.speaker_emb.defined()) require_step_lengths(ctx, speakers, batch, "speakers");
  require_masked_padding(controls);
  if (t > c.max_seq_len) {
    throw InputError("FastSpeech2::encode_on_device: " + std::to_string(t) +
                     " symbols is more than max_seq_len (" + std::to_string(c.max_seq_len) + ")");
  }
  const Tensor speaker_rows =
      w.speaker_emb.defined()
          ? ops::gather_rows(ctx, w.speaker_emb, speakers).reshape({batch, 1, c.encoder_hidden})
          : Tensor();
  const EncoderResult encoded =
      run_encoder(ctx, w, c, ops::gather_rows(ctx, w.src_word_emb, ids), speaker_rows,
                  Lengths{{}, lengths}, controls, Tensor(), Tensor());
  return {encoded.hidden, encoded.log_durations};
}

Tensor FastSpeech2::decode_on_device(Context& ctx, const Tensor& hidden, const Tensor& frame_rows,
                                     const Tensor& mel_lengths,
                                     const SynthesisControls& controls) const {
  const Weights& w = *weights_;
  const FastSpeech2Config& c = config_;
  if (!hidden.defined() || hidden.dim() != 3 || hidden.size(2) != c.encoder_hidden ||
      !hidden.is_contiguous()) {
    throw InputError("FastSpeech2::decode_on_device: hidden must be contiguous [B, T, " +
                     std::to_string(c.encoder_hidden) + "], got " +
                     (hidden.defined() ? hidden.shape_string() : std::string("nothing")));
  }
  const int64_t batch = hidden.size(0);
  if (!frame_rows.defined() || frame_rows.dtype() != DType::I64 || frame_rows.dim() != 2 ||
      frame_rows.size(0) != batch || frame_rows.size(1) < 1 || !frame_rows.is_contiguous()) {
    throw InputError("FastSpeech2::decode_on_device: frame_rows must be contiguous I64 [" +
                     std::to_string(batch) + ", F >= 1], got " +
                     (frame_rows.defined() ? frame_rows.shape_string() : std::string("nothing")));
  }
  const int64_t frames = frame_rows.size(1);
  require_step_lengths(ctx, mel_lengths, batch, "mel_lengths");
  require_masked_padding(controls);
  if (frames > c.max_seq_len) {
    throw InputError("FastSpeech2::decode_on_device: " + std::to_string(frames) +
                     " frames is more than max_seq_len (" + std::to_string(c.max_seq_len) + ")");
  }
  const Tensor regulated =
      ops::gather_rows(ctx, hidden.reshape({batch * hidden.size(1), c.encoder_hidden}), frame_rows)
          .reshape({batch, frames, c.encoder_hidden});
  return run_decoder(ctx, w, c, regulated, Lengths{{}, mel_lengths}, controls, Tensor(), Tensor(),
                     nullptr);
}

}  // namespace voxd
