#include "families/fastspeech2/hifigan.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/weight_loading.h"

namespace voxd {
namespace {

using nlohmann::json;

constexpr float kLreluSlope = 0.1f;   // LRELU_SLOPE in models.py
constexpr float kFinalSlope = 0.01f;  // F.leaky_relu's default, used once after the stages
constexpr int64_t kOuterKernel = 7;   // conv_pre and conv_post
constexpr int64_t kOuterPadding = 3;

// get_padding in utils.py: int((k·d − d) / 2), a truncation (k, d > 0, so a floor).
int64_t get_padding(int64_t kernel, int64_t dilation) {
  return (kernel * dilation - dilation) / 2;
}

int64_t floor_div(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}
int64_t ceil_div(int64_t a, int64_t b) {
  return -floor_div(-a, b);
}

// How many dilations (the first ones) a resblock of `kind` uses.
size_t dilations_used(int kind) {
  return kind == 1 ? 3 : 2;
}

const json& require(const json& j, const char* key, const std::string& where,
                    const char* expected) {
  if (!j.contains(key)) {
    throw InputError(where + ": missing field '" + key + "' (expected " + expected + ")");
  }
  return j.at(key);
}

int64_t positive_int(const json& value, const std::string& where, const std::string& field) {
  if (!value.is_number_integer() || value.get<int64_t>() <= 0) {
    throw InputError(where + ": field '" + field + "' must be a positive integer, got " +
                     value.dump());
  }
  return value.get<int64_t>();
}

std::vector<int64_t> positive_int_list(const json& value, const std::string& where,
                                       const std::string& field) {
  if (!value.is_array() || value.empty()) {
    throw InputError(where + ": field '" + field +
                     "' must be a non-empty list of positive integers, got " + value.dump());
  }
  std::vector<int64_t> out;
  for (size_t i = 0; i < value.size(); ++i) {
    out.push_back(positive_int(value[i], where, field + "[" + std::to_string(i) + "]"));
  }
  return out;
}

}  // namespace

HifiGanConfig HifiGanConfig::from_json(const json& j, const std::string& where) {
  if (!j.is_object()) throw InputError(where + ": expected a JSON object, got " + j.dump());
  HifiGanConfig config;
  const json& resblock = require(j, "resblock", where, "\"1\" or \"2\"");
  if (resblock != "1" && resblock != "2") {
    throw InputError(where + ": field 'resblock' must be \"1\" or \"2\" (a string), got " +
                     resblock.dump());
  }
  config.resblock = resblock == "1" ? 1 : 2;
  const char* int_list = "a non-empty list of positive integers";
  config.upsample_rates =
      positive_int_list(require(j, "upsample_rates", where, int_list), where, "upsample_rates");
  config.upsample_kernel_sizes = positive_int_list(
      require(j, "upsample_kernel_sizes", where, int_list), where, "upsample_kernel_sizes");
  config.upsample_initial_channel =
      positive_int(require(j, "upsample_initial_channel", where, "a positive integer"), where,
                   "upsample_initial_channel");
  config.resblock_kernel_sizes = positive_int_list(
      require(j, "resblock_kernel_sizes", where, int_list), where, "resblock_kernel_sizes");
  const json& dilations =
      require(j, "resblock_dilation_sizes", where, "a list of lists of positive integers");
  if (!dilations.is_array() || dilations.empty()) {
    throw InputError(where +
                     ": field 'resblock_dilation_sizes' must be a non-empty list of lists of "
                     "positive integers, got " +
                     dilations.dump());
  }
  for (size_t i = 0; i < dilations.size(); ++i) {
    config.resblock_dilation_sizes.push_back(positive_int_list(
        dilations[i], where, "resblock_dilation_sizes[" + std::to_string(i) + "]"));
  }
  if (j.contains("num_mels")) config.num_mels = positive_int(j.at("num_mels"), where, "num_mels");
  config.validate(where);
  return config;
}

void HifiGanConfig::validate(const std::string& where) const {
  const auto fail = [&](const std::string& what) { throw InputError(where + ": " + what); };
  const auto positive = [&](const std::vector<int64_t>& values, const std::string& field) {
    if (values.empty()) fail("field '" + field + "' must not be empty");
    for (size_t i = 0; i < values.size(); ++i) {
      if (values[i] <= 0) {
        fail("field '" + field + "[" + std::to_string(i) + "]' must be positive, got " +
             std::to_string(values[i]));
      }
    }
  };
  if (resblock != 1 && resblock != 2) fail("field 'resblock' must be 1 or 2");
  positive(upsample_rates, "upsample_rates");
  positive(upsample_kernel_sizes, "upsample_kernel_sizes");
  positive(resblock_kernel_sizes, "resblock_kernel_sizes");
  if (upsample_kernel_sizes.size() != upsample_rates.size()) {
    fail("field 'upsample_kernel_sizes' has " + std::to_string(upsample_kernel_sizes.size()) +
         " entries, expected one per upsample rate (" + std::to_string(upsample_rates.size()) +
         ")");
  }
  if (resblock_dilation_sizes.size() != resblock_kernel_sizes.size()) {
    fail("field 'resblock_dilation_sizes' has " + std::to_string(resblock_dilation_sizes.size()) +
         " entries, expected one list per resblock kernel size (" +
         std::to_string(resblock_kernel_sizes.size()) + ")");
  }
  if (num_mels <= 0) fail("field 'num_mels' must be positive");
  if (upsample_initial_channel <= 0) fail("field 'upsample_initial_channel' must be positive");
  if (channels(num_upsamples()) == 0) {
    fail("field 'upsample_initial_channel' (" + std::to_string(upsample_initial_channel) +
         ") leaves no channels after " + std::to_string(num_upsamples()) +
         " halvings; expected at least 2^" + std::to_string(num_upsamples()));
  }
  for (size_t i = 0; i < upsample_rates.size(); ++i) {
    if (upsample_kernel_sizes[i] < upsample_rates[i]) {
      fail("field 'upsample_kernel_sizes[" + std::to_string(i) + "]' (" +
           std::to_string(upsample_kernel_sizes[i]) + ") must be at least upsample_rates[" +
           std::to_string(i) + "] (" + std::to_string(upsample_rates[i]) +
           "), or the padding (k - u) / 2 is negative");
    }
  }
  for (size_t i = 0; i < resblock_kernel_sizes.size(); ++i) {
    const std::string field = "resblock_dilation_sizes[" + std::to_string(i) + "]";
    const std::vector<int64_t>& d = resblock_dilation_sizes[i];
    positive(d, field);
    if (d.size() < dilations_used(resblock)) {
      fail("field '" + field + "' has " + std::to_string(d.size()) + " dilations, resblock \"" +
           std::to_string(resblock) + "\" needs " + std::to_string(dilations_used(resblock)));
    }
    const int64_t k = resblock_kernel_sizes[i];
    // A conv keeps the length only when its span d·(k − 1) is even; otherwise the original's
    // residual add fails on mismatched lengths.
    std::vector<int64_t> used(d.begin(),
                              d.begin() + static_cast<ptrdiff_t>(dilations_used(resblock)));
    if (resblock == 1) used.push_back(1);
    for (int64_t dilation : used) {
      if ((k - 1) * dilation % 2 != 0) {
        fail("field 'resblock_kernel_sizes[" + std::to_string(i) + "]' (" + std::to_string(k) +
             ") with dilation " + std::to_string(dilation) +
             " gives a conv that changes the length; (k - 1) * dilation must be even");
      }
    }
  }
}

int64_t HifiGanConfig::hop_length() const {
  int64_t hop = 1;
  for (int64_t u : upsample_rates) hop *= u;
  return hop;
}

int64_t HifiGanConfig::channels(int64_t stage) const {
  int64_t c = upsample_initial_channel;
  for (int64_t s = 0; s < stage && c > 0; ++s) c /= 2;
  return c;
}

int64_t HifiGanConfig::output_length(int64_t frames) const {
  int64_t t = frames;
  for (size_t i = 0; i < upsample_rates.size(); ++i) {
    const int64_t u = upsample_rates[i];
    const int64_t k = upsample_kernel_sizes[i];
    t = (t - 1) * u - 2 * ((k - u) / 2) + k;
  }
  return t;
}

int64_t HifiGanConfig::receptive_field_frames() const {
  int64_t resblock_pad = 0;
  for (size_t i = 0; i < resblock_kernel_sizes.size(); ++i) {
    const int64_t k = resblock_kernel_sizes[i];
    int64_t pad = 0;
    for (size_t m = 0; m < dilations_used(resblock); ++m) {
      pad += get_padding(k, resblock_dilation_sizes[i][m]);
      if (resblock == 1) pad += get_padding(k, 1);
    }
    resblock_pad = std::max(resblock_pad, pad);
  }
  int64_t reach = 0;
  for (int64_t n = 0; n < hop_length(); ++n) {
    int64_t lo = n - kOuterPadding;
    int64_t hi = n + kOuterPadding;
    for (size_t s = upsample_rates.size(); s-- > 0;) {
      const int64_t u = upsample_rates[s];
      const int64_t k = upsample_kernel_sizes[s];
      const int64_t p = (k - u) / 2;
      lo -= resblock_pad;
      hi += resblock_pad;
      lo = ceil_div(lo + p - k + 1, u);
      hi = floor_div(hi + p, u);
    }
    reach = std::max({reach, kOuterPadding - lo, hi + kOuterPadding});
  }
  return reach;
}

HifiGan HifiGan::load(Context& ctx, const HifiGanConfig& config, const WeightSource& weights,
                      DType dtype) {
  config.validate(weights.describe() + " (vocoder config)");
  HifiGan model;
  model.config_ = config;
  model.precision_ = PrecisionPolicy::for_weights(dtype);
  const PrecisionPolicy& precision = model.precision_;
  const auto make_conv = [&](const std::string& prefix, const Shape& shape, int64_t out_channels,
                             int64_t stride, int64_t padding, int64_t dilation, DType dtype) {
    Conv c;
    c.weight = ops::to_device(ctx, load_weight_norm_parameter(weights, prefix, shape), dtype);
    c.bias = load_parameter(ctx, weights, prefix + ".bias", {out_channels}, dtype);
    c.stride = stride;
    c.padding = padding;
    c.dilation = dilation;
    return c;
  };
  const int64_t c0 = config.upsample_initial_channel;
  model.conv_pre_ = make_conv("conv_pre", {c0, config.num_mels, kOuterKernel}, c0, 1, kOuterPadding,
                              1, precision.stream);
  model.conv_pre_.arranged = ops::arrange_conv1d_weight(ctx, model.conv_pre_.weight);
  for (int64_t i = 0; i < config.num_upsamples(); ++i) {
    const int64_t u = config.upsample_rates[static_cast<size_t>(i)];
    const int64_t k = config.upsample_kernel_sizes[static_cast<size_t>(i)];
    const int64_t cin = config.channels(i);
    const int64_t cout = config.channels(i + 1);
    model.ups_.push_back(make_conv("ups." + std::to_string(i), {cin, cout, k}, cout, u, (k - u) / 2,
                                   1, precision.compute));
    Conv& up = model.ups_.back();
    up.arranged =
        ops::arrange_conv_transpose1d_weight(ctx, up.weight, up.bias, upsample_params(up));
    for (int64_t j = 0; j < config.num_kernels(); ++j) {
      const std::string prefix = "resblocks." + std::to_string(i * config.num_kernels() + j);
      const int64_t rk = config.resblock_kernel_sizes[static_cast<size_t>(j)];
      const std::vector<int64_t>& dilations =
          config.resblock_dilation_sizes[static_cast<size_t>(j)];
      const Shape shape = {cout, cout, rk};
      const std::string dilated_name = config.resblock == 1 ? ".convs1." : ".convs.";
      ResBlock block;
      for (size_t m = 0; m < dilations_used(config.resblock); ++m) {
        const int64_t d = dilations[m];
        block.dilated.push_back(make_conv(prefix + dilated_name + std::to_string(m), shape, cout, 1,
                                          get_padding(rk, d), d, precision.compute));
        if (config.resblock == 1) {
          block.plain.push_back(make_conv(prefix + ".convs2." + std::to_string(m), shape, cout, 1,
                                          get_padding(rk, 1), 1, precision.compute));
          for (Conv* c : {&block.dilated.back(), &block.plain.back()}) {
            c->arranged = ops::arrange_conv1d_weight(ctx, c->weight);
          }
        }
      }
      model.resblocks_.push_back(std::move(block));
    }
  }
  model.conv_post_ =
      make_conv("conv_post", {1, config.channels(config.num_upsamples()), kOuterKernel}, 1, 1,
                kOuterPadding, 1, precision.stream);
  return model;
}

ConvTranspose1dParams HifiGan::upsample_params(const Conv& up) {
  ConvTranspose1dParams params;
  params.stride = up.stride;
  params.padding = up.padding;
  return params;
}

Conv1dParams HifiGan::conv1d_params(const Conv& c) {
  Conv1dParams params;
  params.stride = c.stride;
  params.padding = c.padding;
  params.dilation = c.dilation;
  return params;
}

Tensor HifiGan::conv(Context& ctx, const Conv& c, const Tensor& x, ConvFusion fusion) {
  fusion.arranged_weight = c.arranged.defined() ? &c.arranged : nullptr;
  return ops::conv1d(ctx, x, c.weight, c.bias, conv1d_params(c), fusion);
}

Conv1dPair HifiGan::pair(const ResBlock& block, size_t m, const Tensor* residual) const {
  const Conv& first = block.dilated[m];
  const Conv& second = block.plain[m];
  return {
      .first_weight = &first.weight,
      .first_bias = &first.bias,
      .first = {.stride = first.stride, .padding = first.padding, .dilation = first.dilation},
      .second_weight = &second.weight,
      .second_bias = &second.bias,
      .second = {.stride = second.stride, .padding = second.padding, .dilation = second.dilation},
      .slope = kLreluSlope,
      .residual = residual,
      .output_dtype = precision_.stream,
      .first_arranged = first.arranged.defined() ? &first.arranged : nullptr,
      .second_arranged = second.arranged.defined() ? &second.arranged : nullptr};
}

bool HifiGan::resblocks_on_rows(Context& ctx, size_t stage, const Tensor& x) const {
  const auto num_kernels = static_cast<size_t>(config_.num_kernels());
  const Tensor rows = x.transpose(1, 2);
  for (size_t j = 0; j < num_kernels; ++j) {
    const ResBlock& block = resblocks_[stage * num_kernels + j];
    if (block.plain.empty()) return false;
    for (size_t m = 0; m < block.dilated.size(); ++m) {
      if (!ops::fuses_conv1d_pair_rows(ctx, rows, pair(block, m, &rows))) return false;
    }
  }
  return true;
}

bool HifiGan::first_upsampler_on_rows(Context& ctx, const Tensor& x) const {
  if (ups_.empty() || x.dtype() != precision_.compute) return false;
  const Conv& up = ups_[0];
  if (!ctx.backend().runs_conv_transpose1d_rows(x.transpose(1, 2), up.weight,
                                                upsample_params(up))) {
    return false;
  }
  // The first stage's input, [B, C1, T1] as the upsampler writes it: its shape is all that
  // resblocks_on_rows reads.
  const int64_t steps = (x.size(2) - 1) * up.stride - 2 * up.padding + up.weight.size(2);
  const Tensor upsampled = Tensor::borrow(x.raw_data(), {x.size(0), up.weight.size(1), steps},
                                          x.dtype(), x.device(), nullptr);
  return resblocks_on_rows(ctx, 0, upsampled);
}

Tensor HifiGan::resblock(Context& ctx, const ResBlock& block, const Tensor& x, bool rows,
                         const SumTerms& terms) const {
  Tensor out = x;  // never written in place: x is shared by the stage's other resblocks
  const bool two_convs = !block.plain.empty();
  for (size_t m = 0; m < block.dilated.size(); ++m) {
    // leaky_relu → conv [→ leaky_relu → conv] → + out with the activations and the residual
    // fused where the backend fuses them (one pass per conv instead of three; V1's two convs
    // as one pair whose intermediate never becomes a tensor, the last pair also taking the
    // stage's sum terms). Under mixed precision the first conv reads the stream dtype, the last
    // writes it, and what passes between two convs stays in the compute dtype.
    if (two_convs) {
      Conv1dPair step = pair(block, m, &out);
      if (m + 1 == block.dilated.size()) {
        step.addend = terms.addend;
        step.output_scale = terms.scale;
        step.output_slope = terms.slope;
      }
      out = rows ? ops::conv1d_pair_rows(ctx, out, step) : ops::conv1d_pair(ctx, out, step);
    } else {
      out = conv(ctx, block.dilated[m], out, {kLreluSlope, &out, precision_.stream});
    }
  }
  if (!two_convs) ops::add_scale_leaky_relu_(ctx, out, terms.addend, terms.scale, terms.slope);
  return out;
}

Tensor HifiGan::forward(Context& ctx, const Tensor& mel) const {
  if (mel.dim() != 3 || mel.size(1) != config_.num_mels || mel.size(2) < 1) {
    throw Error("HifiGan::forward: mel has shape " + mel.shape_string() + ", expected [B, " +
                std::to_string(config_.num_mels) + ", T] with T >= 1");
  }
  if (!is_floating(mel.dtype())) {
    throw Error("HifiGan::forward: mel has dtype " + std::string(dtype_name(mel.dtype())) +
                ", expected a floating dtype");
  }
  // conv_pre and conv_post run in the stream dtype, the other convs in the compute dtype; the
  // stage sums and the activations between convs are in the stream dtype.
  Tensor x = conv(ctx, conv_pre_, precision_.to_stream(ctx, mel));
  ops::leaky_relu_(ctx, x, kLreluSlope);
  const auto num_kernels = static_cast<size_t>(config_.num_kernels());
  // Where the backend reads and writes V1's pairs as time-major rows, a stage runs on rows [B,
  // T, C]; the upsampler before it then reads rows and writes the stage's (a backend that cannot
  // transposes around it), so that only conv_pre's output is transposed; conv_post reads the
  // last stage's rows.
  bool x_rows = first_upsampler_on_rows(ctx, x);
  if (x_rows) x = ops::transpose(ctx, x, 1, 2);
  for (size_t i = 0; i < ups_.size(); ++i) {
    const Conv& up = ups_[i];
    const ConvTranspose1dParams params = upsample_params(up);
    const auto upsample = [&](const Tensor& in) {
      return x_rows ? ops::conv_transpose1d_rows(ctx, in, up.weight, up.bias, params,
                                                 up.arranged.defined() ? &up.arranged : nullptr)
                    : ops::conv_transpose1d(ctx, in, up.weight, up.bias, params);
    };
    // One expression, so that the stage's input is freed as soon as the upsampler has read it.
    x = precision_.to_stream(ctx, upsample(precision_.to_compute(ctx, x)));
    const bool rows = resblocks_on_rows(ctx, i, x_rows ? x.transpose(1, 2) : x);
    if (rows != x_rows) x = ops::transpose(ctx, x, 1, 2);
    x_rows = rows;
    // The stage's output is the mean of its resblocks, activated for what follows: the next
    // upsampler, or conv_post after the last stage.
    Tensor sum;
    for (size_t j = 0; j < num_kernels; ++j) {
      SumTerms terms;
      terms.addend = sum.defined() ? &sum : nullptr;
      if (j + 1 == num_kernels) {
        terms.scale = 1.0f / static_cast<float>(num_kernels);
        terms.slope = i + 1 < ups_.size() ? kLreluSlope : kFinalSlope;
      }
      sum = resblock(ctx, resblocks_[i * num_kernels + j], x, rows, terms);
    }
    x = std::move(sum);
  }
  // conv_post has one output channel, so over the last stage's rows its output [B, T, 1] is
  // the audio's layout: no transpose either side.
  if (x_rows) {
    x = ops::tanh(ctx, ops::conv1d_rows(ctx, x, conv_post_.weight, conv_post_.bias,
                                        conv1d_params(conv_post_)));
    return x.reshape({x.size(0), x.size(1)});
  }
  x = ops::tanh(ctx, conv(ctx, conv_post_, x));
  return x.reshape({x.size(0), x.size(2)});
}

}  // namespace voxd
