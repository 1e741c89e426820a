#include "families/sambert/sambert.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/weight_loading.h"

namespace voxd {
namespace {

constexpr float kLayerNormEps = 1e-6f;  // every LayerNorm of KAN-TTS's Sambert
const char* const kChannels[4] = {"phone (sy)", "tone", "syllable_flag", "word_segment"};

struct Linear {
  Tensor weight;  // [out, in]
  Tensor bias;    // [out], or undefined
};

struct Norm {
  Tensor gamma, beta;
};

struct EncoderLayer {
  Norm attention_norm;
  Linear qkv, fc;
  bool attention_residual = false;  // the attention's output width equals its input's
  Norm ffn_norm;
  Tensor ffn_conv, ffn_conv_bias;  // [inner, units, 3]
  Linear ffn_out;                  // the kernel-1 conv
};

// FeedForwardNet + MemoryBlockV2 of an FSMN encoder. The first conv's weight is split by the
// parts of the layer's input (text, speaker, emotion for a predictor's first layer).
struct FsmnLayer {
  std::vector<Linear> ffn_in;  // one per input part, the bias on the first
  Linear ffn_out;              // no bias
  Tensor depthwise;            // [memory, 1, K]
  bool residual = false;       // the input's width equals the memory's: the input is added
  // For a residual over an input of several parts: identity column blocks that place each part
  // where it sits in the input (an exact copy, as a concatenation would be).
  std::vector<Linear> residual_parts;
};

struct LstmDirection {
  std::vector<Linear> input;  // W_ih's column blocks by input part, b_ih + b_hh on the first
  Tensor recurrent;           // W_hh [4H, H]
};

struct Predictor {
  std::vector<FsmnLayer> fsmn;
  LstmDirection forward, backward;
  Linear head_forward, head_backward;  // fc's columns over each direction, the bias on the first
  Tensor embed, embed_bias;            // pitch_emb / energy_emb [P, 1, 9]
};

struct DurationPredictor {
  std::vector<Linear> prenet;
  LstmDirection layer0;  // input parts: prenet, text, speaker, emotion
  LstmDirection layer1;
  Linear head;
};

struct DecoderLayer {
  Norm attention_norm;
  Linear qkv, fc_self, fc_memory;
  std::vector<Linear> memory_kv;  // w_h_kv's columns over text, speaker, emotion
  Norm ffn_norm;
  Linear ffn_in, ffn_out;  // kernel-1 convs
};

Tensor apply(Context& ctx, const Tensor& x, const Linear& l) {
  return ops::linear(ctx, x, l.weight, l.bias);
}

// Σ parts[i]'s linear over inputs[i]: one linear layer over the inputs side by side.
Tensor apply_parts(Context& ctx, const std::vector<Tensor>& inputs,
                   const std::vector<Linear>& parts) {
  Tensor sum = apply(ctx, inputs[0], parts[0]);
  for (size_t i = 1; i < parts.size(); ++i) ops::add_(ctx, sum, apply(ctx, inputs[i], parts[i]));
  return sum;
}

Tensor layer_norm(Context& ctx, const Tensor& x, const Norm& n) {
  return ops::layer_norm(ctx, x, n.gamma, n.beta, kLayerNormEps);
}

// [1, T, C] with its features split into heads [1, T, heads, C / heads], contiguous.
Tensor heads_of(Context& ctx, const Tensor& x, int64_t start, int64_t width, int64_t heads) {
  return ops::contiguous(ctx, x.narrow(2, start, width))
      .reshape({x.size(0), x.size(1), heads, width / heads});
}

// The encoder's position table, SinusoidalPositionEncoder's formula (float64, then F32): row n
// is position n + 1; sines in the first half of the columns, cosines in the second.
Tensor position_table(int64_t rows, int64_t depth) {
  const int64_t half = depth / 2;
  const double divisor = static_cast<double>(depth) / 2.0 - 1.0;
  std::vector<float> values(static_cast<size_t>(rows * depth));
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t j = 0; j < half; ++j) {
      const double angle =
          static_cast<double>(n + 1) / std::pow(10000.0, static_cast<double>(j) / divisor);
      values[static_cast<size_t>(n * depth + j)] = static_cast<float>(std::sin(angle));
      values[static_cast<size_t>(n * depth + half + j)] = static_cast<float>(std::cos(angle));
    }
  }
  return Tensor::from_vector({1, rows, depth}, values);
}

// Takes the state dict's tensors, shape-checked, onto the device.
struct Loader {
  Context& ctx;
  const WeightSource& source;
  DType dtype;         // matrices and convs
  DType stream_dtype;  // LayerNorms (the residual stream's)

  Tensor param(const std::string& name, const Shape& shape) const {
    return load_parameter(ctx, source, name, shape, dtype);
  }
  Tensor host(const std::string& name, const Shape& shape) const {
    return load_host_parameter(source, name, shape);
  }
  Shape shape_of(const std::string& name, int64_t rank, const std::string& expected) const {
    return parameter_shape(source, name, rank, expected);
  }

  Tensor device(const Tensor& host_tensor) const {
    return ops::to_device(ctx, host_tensor.to_host_contiguous(DType::F32), dtype);
  }
  // A weight [out, in] (or [out, in, 1], a kernel-1 conv) cut into column blocks of `widths`;
  // `bias` (if any) on the first block.
  std::vector<Linear> split(const std::string& weight_name, int64_t out,
                            const std::vector<int64_t>& widths, bool kernel_dim,
                            const Tensor& bias) const {
    int64_t in = 0;
    for (int64_t w : widths) in += w;
    Tensor w = kernel_dim ? host(weight_name, {out, in, 1}).reshape({out, in})
                          : host(weight_name, {out, in});
    std::vector<Linear> parts;
    int64_t start = 0;
    for (int64_t width : widths) {
      parts.push_back({device(w.narrow(1, start, width)), parts.empty() ? bias : Tensor{}});
      start += width;
    }
    return parts;
  }
  Linear linear(const std::string& prefix, int64_t out, int64_t in, bool bias = true) const {
    return {param(prefix + ".weight", {out, in}), bias ? param(prefix + ".bias", {out}) : Tensor{}};
  }
  Linear conv1x1(const std::string& prefix, int64_t out, int64_t in, bool bias = true) const {
    return {device(host(prefix + ".weight", {out, in, 1}).reshape({out, in})),
            bias ? param(prefix + ".bias", {out}) : Tensor{}};
  }
  Norm norm(const std::string& prefix, int64_t width) const {
    return {load_parameter(ctx, source, prefix + ".weight", {width}, stream_dtype),
            load_parameter(ctx, source, prefix + ".bias", {width}, stream_dtype)};
  }

  std::vector<FsmnLayer> fsmn(const std::string& prefix, const FsmnSizes& s,
                              const std::vector<int64_t>& input_parts) const {
    std::vector<FsmnLayer> layers;
    int64_t input = 0;
    for (int64_t w : input_parts) input += w;
    for (int64_t l = 0; l < s.layers; ++l) {
      const std::string ffn = prefix + ".ffn_lst." + std::to_string(l);
      const std::vector<int64_t> parts =
          l == 0 ? input_parts : std::vector<int64_t>{s.memory_units};
      FsmnLayer layer;
      layer.ffn_in = split(ffn + ".w_1.weight", s.ffn_inner, parts, true,
                           param(ffn + ".w_1.bias", {s.ffn_inner}));
      layer.ffn_out = conv1x1(ffn + ".w_2", s.memory_units, s.ffn_inner, false);
      layer.depthwise = param(prefix + ".memory_block_lst." + std::to_string(l) + ".conv_dw.weight",
                              {s.memory_units, 1, s.filter_size});
      layer.residual = (l == 0 ? input : s.memory_units) == s.memory_units;
      if (layer.residual && parts.size() > 1) {
        int64_t start = 0;
        for (int64_t width : parts) {
          std::vector<float> identity(static_cast<size_t>(s.memory_units * width), 0.0f);
          for (int64_t i = 0; i < width; ++i) {
            identity[static_cast<size_t>((start + i) * width + i)] = 1.0f;
          }
          layer.residual_parts.push_back(
              {device(Tensor::from_vector({s.memory_units, width}, identity)), Tensor{}});
          start += width;
        }
      }
      layers.push_back(std::move(layer));
    }
    return layers;
  }

  // nn.LSTM's layer `layer` (suffix "" or "_reverse") over inputs of `input_parts` widths.
  LstmDirection lstm(const std::string& prefix, int64_t layer, const std::string& suffix,
                     int64_t hidden, const std::vector<int64_t>& input_parts) const {
    const std::string tag = "_l" + std::to_string(layer) + suffix;
    const Tensor b_ih = host(prefix + ".bias_ih" + tag, {4 * hidden});
    const Tensor b_hh = host(prefix + ".bias_hh" + tag, {4 * hidden});
    std::vector<float> bias = b_ih.to_float_vector();
    const std::vector<float> second = b_hh.to_float_vector();
    for (size_t i = 0; i < bias.size(); ++i) bias[i] += second[i];
    LstmDirection d;
    d.input = split(prefix + ".weight_ih" + tag, 4 * hidden, input_parts, false,
                    device(Tensor::from_vector({4 * hidden}, bias)));
    d.recurrent = param(prefix + ".weight_hh" + tag, {4 * hidden, hidden});
    return d;
  }
};

// One FSMN encoder over its input parts [B, T, ...], as FsmnEncoderV2 computes it. `mask`
// ([B, T, 1], or undefined for none) zeroes each layer's context on the rows that are not frames
// of the sequence, as the original's masks do, so that padding and the rows outside a window
// change no frame.
Tensor run_fsmn(Context& ctx, const std::vector<Tensor>& parts,
                const std::vector<FsmnLayer>& layers, const FsmnSizes& sizes, const Tensor& mask) {
  const int64_t left = sizes.left_padding();
  const int64_t padding = std::max(left, sizes.right_padding());
  Tensor x;
  for (size_t l = 0; l < layers.size(); ++l) {
    const FsmnLayer& layer = layers[l];
    const std::vector<Tensor> inputs = l == 0 ? parts : std::vector<Tensor>{x};
    Tensor context =
        apply(ctx, ops::relu(ctx, apply_parts(ctx, inputs, layer.ffn_in)), layer.ffn_out);
    if (mask.defined()) context = ops::mul(ctx, context, mask);
    const int64_t frames = context.size(1);
    // Per channel: context[t] + Σ_k w[k] · context[t − left + k], zeros outside the frames.
    const Tensor windowed =
        ops::conv1d(ctx, ops::transpose(ctx, context, 1, 2), layer.depthwise, Tensor{},
                    {.padding = padding, .groups = sizes.memory_units});
    Tensor out = ops::transpose(ctx, windowed.narrow(2, padding - left, frames), 1, 2);
    ops::add_(ctx, out, context);
    if (!layer.residual_parts.empty()) {
      ops::add_(ctx, out, apply_parts(ctx, inputs, layer.residual_parts));
    } else if (layer.residual) {
      ops::add_(ctx, out, inputs[0]);
    }
    x = std::move(out);
  }
  return x;
}

// One direction of an LSTM layer over [B, T, ...] inputs from zero state, batch b over its
// first lengths[b] steps (all of them when `lengths` is empty).
Tensor run_lstm(Context& ctx, const std::vector<Tensor>& parts, const LstmDirection& d,
                bool reverse, const std::vector<int64_t>& lengths) {
  const int64_t hidden = d.recurrent.size(1);
  Tensor h = ops::zeros(ctx, {parts[0].size(0), hidden});
  Tensor c = ops::zeros(ctx, {parts[0].size(0), hidden});
  return ops::lstm(ctx, apply_parts(ctx, parts, d.input), d.recurrent, h, c, lengths, reverse);
}

// x on ctx's device in `dtype`: itself when it is there already.
Tensor on_device(Context& ctx, const Tensor& x, DType dtype) {
  return x.device() == ctx.device() && x.dtype() == dtype ? x : ops::to_device(ctx, x, dtype);
}

// [B, T, 1] of `dtype` on ctx's device: 1 in the first lengths[b] rows of b, 0 after.
Tensor length_mask(Context& ctx, const std::vector<int64_t>& lengths, int64_t rows, DType dtype) {
  std::vector<float> mask(lengths.size() * static_cast<size_t>(rows), 0.0f);
  for (size_t b = 0; b < lengths.size(); ++b) {
    std::fill_n(mask.begin() + static_cast<int64_t>(b) * rows, lengths[b], 1.0f);
  }
  return ops::to_device(
      ctx, Tensor::from_vector({static_cast<int64_t>(lengths.size()), rows, 1}, mask), dtype);
}

}  // namespace

struct Sambert::Weights {
  PrecisionPolicy precision;
  std::array<Tensor, 4> linguistic_tables;  // [vocab, embedding_dim]
  Tensor position;                          // [1, rows, embedding_dim]
  std::vector<EncoderLayer> encoder;
  Norm encoder_norm;
  Linear projection;
  Tensor speaker_table, emotion_table;
  Predictor pitch, energy;
  DurationPredictor duration;
  std::vector<float> duration_timescales;  // inv_timescales [P]
  std::vector<Linear> decoder_prenet;
  std::vector<Linear> decoder_input;  // dec_in_proj over text frames, speaker, emotion, prenet
  std::vector<DecoderLayer> decoder;
  Norm decoder_norm;
  Linear decoder_output;
  std::vector<FsmnLayer> postnet_fsmn;
  LstmDirection postnet_lstm;
  Linear postnet_output;
};

Sambert Sambert::load(Context& ctx, const SambertConfig& c, const WeightSource& weights,
                      DType dtype) {
  auto w = std::make_shared<Weights>();
  w->precision = PrecisionPolicy::for_weights(dtype);
  const Loader l{ctx, weights, w->precision.compute, w->precision.stream};
  // The encoder and the variance adaptor run in F32 whatever the dtype: they run once an
  // utterance, and every token's frames come from them, so half precision would move durations
  // (and the decoder's whole schedule) where the F32 original has them.
  const Loader f32{ctx, weights, DType::F32, DType::F32};
  const std::array<const char*, 4> tables = {"sy_emb", "tone_emb", "syllable_flag_emb", "ws_emb"};
  for (size_t i = 0; i < 4; ++i) {
    const std::string name = std::string("text_encoder.") + tables[i] + ".weight";
    const int64_t rows = f32.shape_of(name, 2, "[vocabulary, embedding_dim]")[0];
    w->linguistic_tables[i] = f32.param(name, {rows, c.embedding_dim});
  }
  const std::string enc = "text_encoder.ling_enc.";
  const std::string position = enc + "position_enc.position_enc";
  w->position = f32.param(
      position, {1, f32.shape_of(position, 3, "[1, max_len, embedding_dim]")[1], c.embedding_dim});
  const int64_t units = c.encoder_units;
  for (int64_t i = 0; i < c.encoder_layers; ++i) {
    const std::string p = enc + "fft." + std::to_string(i) + ".";
    const int64_t in = i == 0 ? c.embedding_dim : units;
    EncoderLayer layer;
    layer.attention_norm = f32.norm(p + "slf_attn.layer_norm", in);
    layer.qkv = f32.linear(p + "slf_attn.w_qkv", 3 * units, in);
    layer.fc = f32.linear(p + "slf_attn.fc", units, units);
    layer.attention_residual = in == units;
    layer.ffn_norm = f32.norm(p + "pos_ffn.layer_norm", units);
    layer.ffn_conv = f32.param(p + "pos_ffn.w_1.weight", {c.encoder_ffn_inner, units, 3});
    layer.ffn_conv_bias = f32.param(p + "pos_ffn.w_1.bias", {c.encoder_ffn_inner});
    layer.ffn_out = f32.conv1x1(p + "pos_ffn.w_2", units, c.encoder_ffn_inner);
    w->encoder.push_back(std::move(layer));
  }
  w->encoder_norm = f32.norm(enc + "ln", units);
  w->projection = f32.linear("text_encoder.ling_proj", c.projection_units, units, false);
  w->speaker_table = f32.param(
      "spk_tokenizer.weight",
      {f32.shape_of("spk_tokenizer.weight", 2, "[speakers, speaker_units]")[0], c.speaker_units});
  w->emotion_table = f32.param(
      "emo_tokenizer.weight",
      {f32.shape_of("emo_tokenizer.weight", 2, "[emotions, emotion_units]")[0], c.emotion_units});

  const int64_t p_units = c.projection_units;
  const std::vector<int64_t> token_parts = {p_units, c.speaker_units, c.emotion_units};
  for (auto [name, predictor] : {std::pair{"pitch", &w->pitch}, std::pair{"energy", &w->energy}}) {
    const std::string p = std::string("variance_adaptor.") + name + "_predictor.";
    const int64_t hidden = c.predictor.lstm_units;
    predictor->fsmn = f32.fsmn(p + "fsmn", c.predictor, token_parts);
    const std::vector<int64_t> memory = {c.predictor.memory_units};
    predictor->forward = f32.lstm(p + "blstm", 0, "", hidden, memory);
    predictor->backward = f32.lstm(p + "blstm", 0, "_reverse", hidden, memory);
    const std::vector<Linear> head =
        f32.split(p + "fc.weight", 1, {hidden, hidden}, false, f32.param(p + "fc.bias", {1}));
    predictor->head_forward = head[0];
    predictor->head_backward = head[1];
    const std::string embed = std::string("variance_adaptor.") + name + "_emb.";
    predictor->embed = f32.param(embed + "weight", {p_units, 1, 9});
    predictor->embed_bias = f32.param(embed + "bias", {p_units});
  }
  const std::string dur = "variance_adaptor.duration_predictor.";
  int64_t prenet_in = 1;
  for (size_t i = 0; i < c.duration_prenet_units.size(); ++i) {
    const int64_t out = c.duration_prenet_units[i];
    w->duration.prenet.push_back(
        f32.linear(dur + "prenet.fcs." + std::to_string(3 * i), out, prenet_in));
    prenet_in = out;
  }
  const int64_t dh = c.duration_lstm_units;
  w->duration.layer0 =
      f32.lstm(dur + "lstm", 0, "", dh, {prenet_in, p_units, c.speaker_units, c.emotion_units});
  w->duration.layer1 = f32.lstm(dur + "lstm", 1, "", dh, {dh});
  w->duration.head = f32.linear(dur + "fc", 1, dh);
  w->duration_timescales =
      f32.host("variance_adaptor.dur_position_encoder.inv_timescales", {p_units}).to_float_vector();

  const std::string dec = "mel_decoder.mel_dec.";
  const int64_t d_units = c.decoder_units;
  const int64_t r = c.outputs_per_step;
  int64_t in = c.num_mels;
  for (size_t i = 0; i < c.decoder_prenet_units.size(); ++i) {
    const int64_t out = c.decoder_prenet_units[i];
    w->decoder_prenet.push_back(l.linear(dec + "prenet.fcs." + std::to_string(3 * i), out, in));
    in = out;
  }
  w->decoder_prenet.push_back(l.linear(
      dec + "prenet.fcs." + std::to_string(3 * c.decoder_prenet_units.size()), d_units, in));
  const std::vector<int64_t> memory_parts = {r * p_units, c.speaker_units, c.emotion_units};
  w->decoder_input = l.split(dec + "dec_in_proj.weight", d_units,
                             {r * p_units, c.speaker_units, c.emotion_units, d_units}, false,
                             l.param(dec + "dec_in_proj.bias", {d_units}));
  for (int64_t j = 0; j < c.decoder_layers; ++j) {
    const std::string p = dec + "pnca." + std::to_string(j) + ".";
    DecoderLayer layer;
    layer.attention_norm = l.norm(p + "pnca_attn.layer_norm", d_units);
    layer.qkv = l.linear(p + "pnca_attn.w_x_qkv", 3 * d_units, d_units);
    layer.fc_self = l.linear(p + "pnca_attn.fc_x", d_units, d_units);
    layer.memory_kv = l.split(p + "pnca_attn.w_h_kv.weight", 2 * d_units, memory_parts, false,
                              l.param(p + "pnca_attn.w_h_kv.bias", {2 * d_units}));
    layer.fc_memory = l.linear(p + "pnca_attn.fc_h", d_units, d_units);
    layer.ffn_norm = l.norm(p + "pos_ffn.layer_norm", d_units);
    layer.ffn_in = l.conv1x1(p + "pos_ffn.w_1", c.decoder_ffn_inner, d_units);
    layer.ffn_out = l.conv1x1(p + "pos_ffn.w_2", d_units, c.decoder_ffn_inner);
    w->decoder.push_back(std::move(layer));
  }
  w->decoder_norm = l.norm(dec + "ln", d_units);
  w->decoder_output = l.linear(dec + "dec_out_proj", r * c.num_mels, d_units);

  w->postnet_fsmn = l.fsmn("mel_postnet.fsmn", c.postnet, {c.num_mels});
  w->postnet_lstm =
      l.lstm("mel_postnet.lstm", 0, "", c.postnet.lstm_units, {c.postnet.memory_units});
  w->postnet_output = l.linear("mel_postnet.fc", c.num_mels, c.postnet.lstm_units);
  return Sambert(c, std::move(w));
}

std::array<int64_t, 4> Sambert::linguistic_vocabulary() const {
  std::array<int64_t, 4> sizes{};
  for (size_t i = 0; i < 4; ++i) sizes[i] = weights_->linguistic_tables[i].size(0);
  return sizes;
}

int64_t Sambert::n_emotions() const {
  return weights_->emotion_table.size(0);
}

int64_t Sambert::n_speakers() const {
  return weights_->speaker_table.size(0);
}

DType Sambert::dtype() const {
  return weights_->decoder_output.weight.dtype();
}

int64_t Sambert::stored_positions() const {
  return weights_->position.size(1);
}

void Sambert::check(const SambertTokens& tokens, const SambertLimits& limits) const {
  const Weights& w = *weights_;
  const int64_t n = static_cast<int64_t>(tokens.linguistic.size());
  if (n == 0) throw InputError("Sambert: the utterance has no token");
  if (n > limits.max_tokens) {
    throw InputTooLongError("Sambert: the utterance has " + std::to_string(n) +
                            " tokens, more than the " + std::to_string(limits.max_tokens) +
                            " one may have; split the sentence");
  }
  if (static_cast<int64_t>(tokens.emotion.size()) != n ||
      static_cast<int64_t>(tokens.speaker.size()) != n) {
    throw InputError("Sambert: " + std::to_string(n) + " tokens but " +
                     std::to_string(tokens.emotion.size()) + " emotions and " +
                     std::to_string(tokens.speaker.size()) + " speakers; one of each per token");
  }
  const auto check_id = [&](int64_t id, int64_t rows, const std::string& channel, int64_t token) {
    if (id < 0 || id >= rows) {
      throw InputError("Sambert: token " + std::to_string(token) + " has " + channel + " id " +
                       std::to_string(id) + ", outside the table's " + std::to_string(rows) +
                       " rows");
    }
  };
  for (int64_t t = 0; t < n; ++t) {
    for (size_t ch = 0; ch < 4; ++ch) {
      check_id(tokens.linguistic[static_cast<size_t>(t)][ch], w.linguistic_tables[ch].size(0),
               kChannels[ch], t);
    }
    check_id(tokens.emotion[static_cast<size_t>(t)], n_emotions(), "emotion", t);
    check_id(tokens.speaker[static_cast<size_t>(t)], n_speakers(), "speaker", t);
  }
}

std::vector<SambertEncoding> Sambert::encode(Context& ctx,
                                             const std::vector<const SambertTokens*>& batch,
                                             int64_t padded, bool masked,
                                             SambertDebug* debug) const {
  const Weights& w = *weights_;
  const SambertConfig& c = config_;
  const auto b = static_cast<int64_t>(batch.size());
  VOXD_CHECK(b >= 1, "Sambert::encode needs at least one utterance");
  VOXD_CHECK(debug == nullptr || b == 1, "Sambert::encode keeps debug outputs of one utterance");
  std::vector<int64_t> lengths;
  std::array<std::vector<int64_t>, 4> channel_ids;
  for (auto& ids : channel_ids) ids.assign(static_cast<size_t>(b * padded), 0);
  std::vector<int64_t> speaker_ids(static_cast<size_t>(b * padded), 0);
  std::vector<int64_t> emotion_ids(static_cast<size_t>(b * padded), 0);
  for (int64_t i = 0; i < b; ++i) {
    const SambertTokens& tokens = *batch[static_cast<size_t>(i)];
    const auto n = static_cast<int64_t>(tokens.linguistic.size());
    VOXD_CHECK(n >= 1 && n <= padded, "Sambert::encode: an utterance longer than the padding");
    VOXD_CHECK(masked || (b == 1 && n == padded), "Sambert::encode: padding must be masked");
    lengths.push_back(n);
    for (int64_t t = 0; t < n; ++t) {
      const auto at = static_cast<size_t>(i * padded + t);
      for (size_t ch = 0; ch < 4; ++ch) {
        channel_ids[ch][at] = tokens.linguistic[static_cast<size_t>(t)][ch];
      }
      speaker_ids[at] = tokens.speaker[static_cast<size_t>(t)];
      emotion_ids[at] = tokens.emotion[static_cast<size_t>(t)];
    }
  }
  // All of it in F32 (Sambert::load).
  const Tensor mask = masked ? length_mask(ctx, lengths, padded, DType::F32) : Tensor{};
  const std::vector<int64_t> lstm_lengths = masked ? lengths : std::vector<int64_t>{};

  // Text encoder.
  Tensor x =
      ops::embedding(ctx, Tensor::from_vector({b, padded}, channel_ids[0]), w.linguistic_tables[0]);
  for (size_t ch = 1; ch < 4; ++ch) {
    ops::add_(ctx, x,
              ops::embedding(ctx, Tensor::from_vector({b, padded}, channel_ids[ch]),
                             w.linguistic_tables[ch]));
  }
  x = ops::scale(ctx, x, std::sqrt(static_cast<float>(c.encoder_units)));
  const Tensor positions =
      padded <= w.position.size(1)
          ? ops::contiguous(ctx, w.position.narrow(1, 0, padded))
          : ops::to_device(ctx, position_table(padded, c.embedding_dim), x.dtype());
  ops::add_(ctx, x, positions);
  const int64_t e_heads = c.encoder_heads;
  const int64_t e_units = c.encoder_units;
  AttentionParams encoder_attention;
  encoder_attention.scale = 1.0f / std::sqrt(static_cast<float>(e_units / e_heads));
  if (masked) encoder_attention.key_lengths = lengths;
  for (const EncoderLayer& layer : w.encoder) {
    const Tensor qkv = apply(ctx, layer_norm(ctx, x, layer.attention_norm), layer.qkv);
    Tensor attended = ops::attention(
        ctx, heads_of(ctx, qkv, 0, e_units, e_heads), heads_of(ctx, qkv, e_units, e_units, e_heads),
        heads_of(ctx, qkv, 2 * e_units, e_units, e_heads), encoder_attention);
    Tensor a = apply(ctx, attended.reshape({b, padded, e_units}), layer.fc);
    if (layer.attention_residual) ops::add_(ctx, a, x);
    Tensor normed = layer_norm(ctx, a, layer.ffn_norm);
    if (masked) normed = ops::mul(ctx, normed, mask);  // the kernel-3 conv reads no padding
    const Tensor inner =
        ops::relu(ctx, ops::conv1d(ctx, ops::transpose(ctx, normed, 1, 2), layer.ffn_conv,
                                   layer.ffn_conv_bias, {.padding = 1}));
    x = apply(ctx, ops::transpose(ctx, inner, 1, 2), layer.ffn_out);
    ops::add_(ctx, x, a);
  }
  const Tensor text = apply(ctx, layer_norm(ctx, x, w.encoder_norm), w.projection);  // [B, N, P]
  const Tensor speaker =
      ops::embedding(ctx, Tensor::from_vector({b, padded}, speaker_ids), w.speaker_table);
  const Tensor emotion =
      ops::embedding(ctx, Tensor::from_vector({b, padded}, emotion_ids), w.emotion_table);

  // Pitch and energy, each embedded back onto the text.
  Tensor text_aug = text;
  std::array<Tensor, 2> predictions;
  for (size_t i = 0; i < 2; ++i) {
    const Predictor& p = i == 0 ? w.pitch : w.energy;
    const Tensor hidden = run_fsmn(ctx, {text, speaker, emotion}, p.fsmn, c.predictor, mask);
    const Tensor forward = run_lstm(ctx, {hidden}, p.forward, false, lstm_lengths);
    const Tensor backward = run_lstm(ctx, {hidden}, p.backward, true, lstm_lengths);
    predictions[i] = apply_parts(ctx, {forward, backward}, {p.head_forward, p.head_backward});
    if (masked) predictions[i] = ops::mul(ctx, predictions[i], mask);
    const Tensor embedded = ops::conv1d(ctx, predictions[i].reshape({b, 1, padded}), p.embed,
                                        p.embed_bias, {.padding = 4});
    text_aug = ops::add(ctx, text_aug, ops::transpose(ctx, embedded, 1, 2));
  }

  // Durations, token by token (every utterance of the batch at once; past its length an
  // utterance's steps make values no one reads).
  const DurationPredictor& dp = w.duration;
  // The condition's part of the first layer's gates, for every token at once (the bias rides on
  // the prenet's block, input[0], added each step).
  const Tensor condition =
      apply_parts(ctx, {text_aug, speaker, emotion},
                  {dp.layer0.input[1], dp.layer0.input[2], dp.layer0.input[3]});
  const int64_t dh = dp.layer1.recurrent.size(1);
  Tensor h0 = ops::zeros(ctx, {b, dh}), c0 = ops::zeros(ctx, {b, dh});
  Tensor h1 = ops::zeros(ctx, {b, dh}), c1 = ops::zeros(ctx, {b, dh});
  Tensor log_durations = ops::zeros(ctx, {b, padded, 1});
  Tensor previous = ops::zeros(ctx, {b, 1, 1});
  for (int64_t t = 0; t < padded; ++t) {
    Tensor pre = previous;
    for (const Linear& layer : dp.prenet) pre = ops::relu(ctx, apply(ctx, pre, layer));
    Tensor gates = apply(ctx, pre, dp.layer0.input[0]);
    ops::add_(ctx, gates, condition.narrow(1, t, 1));
    const Tensor out0 = ops::lstm(ctx, gates, dp.layer0.recurrent, h0, c0, {}, false);
    const Tensor out1 = ops::lstm(ctx, apply(ctx, out0, dp.layer1.input[0]), dp.layer1.recurrent,
                                  h1, c1, {}, false);
    previous = ops::relu(ctx, apply(ctx, out1, dp.head));
    ops::write_rows(ctx, log_durations, previous, std::vector<int64_t>(static_cast<size_t>(b), t));
  }

  const Tensor text_host = ops::to_host(ctx, text_aug);
  const std::vector<float> log_d = ops::to_host(ctx, log_durations).to_float_vector();
  std::vector<SambertEncoding> out(static_cast<size_t>(b));
  for (int64_t i = 0; i < b; ++i) {
    const int64_t n = lengths[static_cast<size_t>(i)];
    SambertEncoding& e = out[static_cast<size_t>(i)];
    e.text = text_host.select(0, i).narrow(0, 0, n).to_host_contiguous(DType::F32);
    e.log_durations.assign(log_d.begin() + i * padded, log_d.begin() + i * padded + n);
  }
  if (debug != nullptr) {
    const int64_t n = lengths[0];
    debug->text_hidden = ops::to_host(ctx, text).reshape({n, c.projection_units});
    debug->pitch = ops::to_host(ctx, predictions[0]).reshape({n});
    debug->energy = ops::to_host(ctx, predictions[1]).reshape({n});
    debug->log_durations = Tensor::from_vector({n}, out[0].log_durations);
  }
  return out;
}

SambertAlignment Sambert::align(const std::vector<float>& log_durations,
                                const SambertLimits& limits) const {
  const int64_t r = config_.outputs_per_step;
  SambertAlignment a;
  float longest = 0.0f;
  for (size_t t = 0; t < log_durations.size(); ++t) {
    const float d = std::exp(log_durations[t]) - 1.0f;
    // Checked before any cast: a model can predict any log duration (or NaN, a broken model).
    if (std::isnan(d)) {
      throw Error("Sambert: the duration predictor gave NaN for token " + std::to_string(t));
    }
    if (!(d + 0.5f < static_cast<float>(limits.max_frames - a.frames + 1))) {
      throw InputTooLongError("Sambert: token " + std::to_string(t) + " would take " +
                              std::to_string(d) + " frames, past the " +
                              std::to_string(limits.max_frames) +
                              " frames an utterance may have; split the sentence");
    }
    longest = std::max(longest, d);
    a.durations.push_back(static_cast<int64_t>(d + 0.5f));
    a.frames += a.durations.back();
  }
  a.band_width = static_cast<int64_t>(longest / static_cast<float>(r) + 0.5f);
  a.steps = (a.frames + r - 1) / r;
  return a;
}

SambertMemory Sambert::memory(const SambertTokens& tokens, const SambertEncoding& encoding,
                              const SambertAlignment& alignment) const {
  const int64_t r = config_.outputs_per_step;
  const int64_t p = config_.projection_units;
  const int64_t steps = alignment.steps;
  // Each frame's token and the token's first frame.
  std::vector<int64_t> token_of_frame;
  std::vector<int64_t> token_start;
  for (size_t t = 0; t < alignment.durations.size(); ++t) {
    const auto start = static_cast<int64_t>(token_of_frame.size());
    for (int64_t k = 0; k < alignment.durations[t]; ++k) {
      token_of_frame.push_back(static_cast<int64_t>(t));
      token_start.push_back(start);
    }
  }
  const std::vector<float>& timescales = weights_->duration_timescales;
  const float* text = encoding.text.data<float>();
  std::vector<float> groups(static_cast<size_t>(steps * r * p), 0.0f);
  for (int64_t f = 0; f < steps * r; ++f) {
    const bool real = f < alignment.frames;
    // 1-based inside the token; the frames padding the last step get position 0.
    const int64_t position = real ? f - token_start[static_cast<size_t>(f)] + 1 : 0;
    const float* row = real ? text + token_of_frame[static_cast<size_t>(f)] * p : nullptr;
    for (int64_t i = 0; i < p; ++i) {
      const float angle = static_cast<float>(position) / timescales[static_cast<size_t>(i)];
      const float encoded = i % 2 == 0 ? std::sin(angle) : std::cos(angle);
      groups[static_cast<size_t>(f * p + i)] = (real ? row[i] : 0.0f) + encoded;
    }
  }
  SambertMemory m;
  m.text = Tensor::from_vector({steps, r * p}, groups);
  for (int64_t s = 0; s < steps; ++s) {
    const auto token = static_cast<size_t>(token_of_frame[static_cast<size_t>(s * r)]);
    m.speaker.push_back(tokens.speaker[token]);
    m.emotion.push_back(tokens.emotion[token]);
  }
  return m;
}

PagedKvCache Sambert::make_cache(Context& ctx, int64_t pages, int64_t page_size) const {
  return PagedKvCache::make(ctx, config_.decoder_layers, pages, page_size, config_.decoder_heads,
                            config_.decoder_units / config_.decoder_heads, dtype());
}

Tensor Sambert::prefill(Context& ctx, PagedKvCache& cache,
                        const std::vector<const SambertMemory*>& batch,
                        const std::vector<const std::vector<int64_t>*>& pages, int64_t padded,
                        SambertDebug* debug) const {
  const Weights& w = *weights_;
  const SambertConfig& c = config_;
  const auto b = static_cast<int64_t>(batch.size());
  VOXD_CHECK(b >= 1 && pages.size() == batch.size(), "Sambert::prefill: one page list per memory");
  VOXD_CHECK(debug == nullptr || b == 1, "Sambert::prefill keeps debug outputs of one utterance");
  const int64_t width = c.outputs_per_step * c.projection_units;
  std::vector<float> text(static_cast<size_t>(b * padded * width), 0.0f);
  std::vector<int64_t> speaker_ids(static_cast<size_t>(b * padded), 0);
  std::vector<int64_t> emotion_ids(static_cast<size_t>(b * padded), 0);
  // As wide as the padding's pages whatever the pages given: the step's memory depends on its
  // shape alone.
  const int64_t table_width = (padded + cache.page_size - 1) / cache.page_size;
  for (int64_t i = 0; i < b; ++i) {
    const SambertMemory& m = *batch[static_cast<size_t>(i)];
    const int64_t steps = m.text.size(0);
    VOXD_CHECK(steps <= padded, "Sambert::prefill: a memory longer than the padding");
    std::copy_n(m.text.data<float>(), steps * width, text.begin() + i * padded * width);
    std::copy(m.speaker.begin(), m.speaker.end(), speaker_ids.begin() + i * padded);
    std::copy(m.emotion.begin(), m.emotion.end(), emotion_ids.begin() + i * padded);
    VOXD_CHECK(static_cast<int64_t>(pages[static_cast<size_t>(i)]->size()) <= table_width,
               "Sambert::prefill: more pages than the padding takes");
  }
  // The speaker and emotion tables are the encoder's (F32).
  const std::vector<Tensor> memory = {
      ops::to_device(ctx, Tensor::from_vector({b, padded, width}, text), dtype()),
      w.precision.to_compute(
          ctx, ops::embedding(ctx, Tensor::from_vector({b, padded}, speaker_ids), w.speaker_table)),
      w.precision.to_compute(ctx, ops::embedding(ctx, Tensor::from_vector({b, padded}, emotion_ids),
                                                 w.emotion_table))};
  const Tensor input =
      apply_parts(ctx, memory, {w.decoder_input[0], w.decoder_input[1], w.decoder_input[2]});
  const Tensor table = on_device(ctx, page_table(pages, table_width), DType::I64);
  const Tensor starts = on_device(
      ctx, Tensor::from_vector({b}, std::vector<int64_t>(static_cast<size_t>(b), 0)), DType::I64);
  const int64_t d_units = c.decoder_units;
  const int64_t d_heads = c.decoder_heads;
  for (size_t j = 0; j < w.decoder.size(); ++j) {
    const Tensor kv = apply_parts(ctx, memory, w.decoder[j].memory_kv);
    ops::write_pages(ctx, cache.keys[j], heads_of(ctx, kv, 0, d_units, d_heads), table, starts);
    ops::write_pages(ctx, cache.values[j], heads_of(ctx, kv, d_units, d_units, d_heads), table,
                     starts);
  }
  if (debug != nullptr) {
    const int64_t steps = batch[0]->text.size(0);
    const std::vector<float> speaker = ops::to_host(ctx, memory[1]).to_float_vector();
    const std::vector<float> emotion = ops::to_host(ctx, memory[2]).to_float_vector();
    std::vector<float> joined;
    for (int64_t s = 0; s < steps; ++s) {
      joined.insert(joined.end(), text.begin() + s * width, text.begin() + (s + 1) * width);
      joined.insert(joined.end(), speaker.begin() + s * c.speaker_units,
                    speaker.begin() + (s + 1) * c.speaker_units);
      joined.insert(joined.end(), emotion.begin() + s * c.emotion_units,
                    emotion.begin() + (s + 1) * c.emotion_units);
    }
    debug->memory = Tensor::from_vector({steps, c.memory_units()}, joined);
  }
  return ops::to_host(ctx, input);
}

Tensor Sambert::decode(Context& ctx, PagedKvCache& cache, const SambertStepInputs& in) const {
  const Weights& w = *weights_;
  const SambertConfig& c = config_;
  const DType dtype = this->dtype();
  const int64_t d_units = c.decoder_units;
  const int64_t d_heads = c.decoder_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d_units / d_heads));
  // The tables go to the device once for the step's 4 · layers paged ops.
  const Tensor step_table = on_device(ctx, in.step_table, DType::I64);
  const Tensor steps = on_device(ctx, in.steps, DType::I64);
  const Tensor step_starts = on_device(ctx, in.step_starts, DType::I64);
  const Tensor memory_table = on_device(ctx, in.memory_table, DType::I64);
  const Tensor memory_ends = on_device(ctx, in.memory_ends, DType::I64);

  Tensor pre = on_device(ctx, in.previous_frame, dtype);
  for (size_t i = 0; i < w.decoder_prenet.size(); ++i) {
    pre = apply(ctx, pre, w.decoder_prenet[i]);
    if (i + 1 < w.decoder_prenet.size()) pre = ops::relu(ctx, pre);
  }
  Tensor input = apply(ctx, pre, w.decoder_input[3]);
  ops::add_(ctx, input, on_device(ctx, in.memory_input, dtype));
  // u and next are the residual stream (the stream dtype); the rest computes in the compute dtype.
  const PrecisionPolicy& precision = w.precision;
  Tensor u =
      precision.to_stream(ctx, ops::scale(ctx, input, std::sqrt(static_cast<float>(d_units))));
  const int64_t b = u.size(0);
  for (size_t j = 0; j < w.decoder.size(); ++j) {
    const DecoderLayer& layer = w.decoder[j];
    const Tensor qkv =
        apply(ctx, precision.to_compute(ctx, layer_norm(ctx, u, layer.attention_norm)), layer.qkv);
    const Tensor q = heads_of(ctx, qkv, 0, d_units, d_heads);
    ops::write_pages(ctx, cache.keys[j], heads_of(ctx, qkv, d_units, d_units, d_heads), step_table,
                     steps);
    ops::write_pages(ctx, cache.values[j], heads_of(ctx, qkv, 2 * d_units, d_units, d_heads),
                     step_table, steps);
    // Its own steps [s − band, s], and its memory's steps [s, s + band].
    const Tensor to_steps = ops::paged_attention(ctx, q, cache.keys[j], cache.values[j], step_table,
                                                 steps, scale, step_starts);
    const Tensor to_memory = ops::paged_attention(ctx, q, cache.keys[j], cache.values[j],
                                                  memory_table, memory_ends, scale, steps);
    Tensor attended = apply(ctx, to_steps.reshape({b, 1, d_units}), layer.fc_self);
    ops::add_(ctx, attended, apply(ctx, to_memory.reshape({b, 1, d_units}), layer.fc_memory));
    Tensor next = precision.to_stream(ctx, attended);
    ops::add_(ctx, next, u);
    const Tensor normed = precision.to_compute(ctx, layer_norm(ctx, next, layer.ffn_norm));
    u = precision.to_stream(
        ctx, apply(ctx, ops::relu(ctx, apply(ctx, normed, layer.ffn_in)), layer.ffn_out));
    ops::add_(ctx, u, next);
  }
  return apply(ctx, precision.to_compute(ctx, layer_norm(ctx, u, w.decoder_norm)),
               w.decoder_output);
}

Tensor Sambert::postnet(Context& ctx, SambertPostnetInputs& in) const {
  const Weights& w = *weights_;
  const Tensor fsmn = run_fsmn(ctx, {in.window}, w.postnet_fsmn, config_.postnet, in.mask);
  const Tensor gates = apply_parts(ctx, {ops::contiguous(ctx, fsmn.narrow(1, in.first, in.rows))},
                                   w.postnet_lstm.input);
  const Tensor out =
      ops::lstm(ctx, gates, w.postnet_lstm.recurrent, in.h, in.c, in.counts, /*reverse=*/false);
  Tensor mel = apply(ctx, out, w.postnet_output);
  ops::add_(ctx, mel, in.window.narrow(1, in.first, in.rows));
  return mel;
}

SambertOutput Sambert::synthesize(Context& ctx, const SambertTokens& tokens, SambertDebug* debug,
                                  const SambertLimits& limits) const {
  check(tokens, limits);
  const SambertConfig& c = config_;
  const auto n = static_cast<int64_t>(tokens.linguistic.size());
  const SambertEncoding encoding = std::move(encode(ctx, {&tokens}, n, false, debug)[0]);
  const SambertAlignment alignment = align(encoding.log_durations, limits);
  if (alignment.frames == 0) return {.mel = Tensor(), .durations = alignment.durations};
  const SambertMemory memory_in = memory(tokens, encoding, alignment);
  const int64_t steps = alignment.steps;
  const int64_t band = alignment.band_width;

  // Pages of its own for the memory's steps and the decoder's.
  constexpr int64_t kPageSize = 16;
  const int64_t pages = (steps + kPageSize - 1) / kPageSize;
  PagedKvCache cache = make_cache(ctx, 2 * pages, kPageSize);
  std::vector<int64_t> memory_pages(static_cast<size_t>(pages));
  std::vector<int64_t> step_pages(static_cast<size_t>(pages));
  for (int64_t i = 0; i < pages; ++i) {
    memory_pages[static_cast<size_t>(i)] = i;
    step_pages[static_cast<size_t>(i)] = pages + i;
  }
  const Tensor memory_input = prefill(ctx, cache, {&memory_in}, {&memory_pages}, steps, debug);

  const int64_t mels = c.num_mels;
  const int64_t r = c.outputs_per_step;
  SambertStepInputs in;
  in.step_table = page_table({&step_pages}, pages);
  in.memory_table = page_table({&memory_pages}, pages);
  std::vector<float> decoded;
  decoded.reserve(static_cast<size_t>(steps * r * mels));
  std::vector<float> previous(static_cast<size_t>(mels), 0.0f);
  for (int64_t s = 0; s < steps; ++s) {
    in.previous_frame = Tensor::from_vector({1, 1, mels}, previous);
    in.memory_input = memory_input.narrow(1, s, 1);
    in.steps = Tensor::from_vector({1}, std::vector<int64_t>{s});
    in.step_starts = Tensor::from_vector({1}, std::vector<int64_t>{std::max<int64_t>(0, s - band)});
    in.memory_ends = Tensor::from_vector({1}, std::vector<int64_t>{std::min(s + band, steps - 1)});
    const std::vector<float> frames = ops::to_host(ctx, decode(ctx, cache, in)).to_float_vector();
    decoded.insert(decoded.end(), frames.begin(), frames.end());
    previous.assign(frames.end() - mels, frames.end());
  }
  const int64_t t = alignment.frames;
  decoded.resize(static_cast<size_t>(t * mels));
  const Tensor decoder_mel = Tensor::from_vector({1, t, mels}, decoded);

  SambertPostnetInputs post;
  post.window = ops::to_device(ctx, decoder_mel, dtype());
  post.counts = {t};
  post.rows = t;
  post.h = ops::zeros(ctx, {1, c.postnet.lstm_units});
  post.c = ops::zeros(ctx, {1, c.postnet.lstm_units});
  SambertOutput result;
  result.mel = postnet(ctx, post).reshape({t, mels});
  result.durations = alignment.durations;
  result.band_width = band;
  if (debug != nullptr) debug->decoder_mel = decoder_mel.reshape({t, mels});
  return result;
}

}  // namespace voxd
