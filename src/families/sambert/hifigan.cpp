#include "families/sambert/hifigan.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/config_fields.h"
#include "core/error.h"
#include "core/weight_loading.h"

namespace voxd {
namespace {

using nlohmann::json;

constexpr float kFinalSlope = 0.01f;  // F.leaky_relu's default, before conv_post

void refuse(const std::string& where, const std::string& field, const std::string& why) {
  throw InputError(where + ": field '" + field + "' " + why);
}

void require_odd(const std::vector<int64_t>& values, const std::string& field,
                 const std::string& where) {
  for (int64_t v : values) {
    if (v % 2 == 0)
      refuse(where, field,
             "holds the even kernel " + std::to_string(v) + "; the original needs odd ones");
  }
}

int64_t floor_div(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

int64_t ceil_div(int64_t a, int64_t b) {
  return -floor_div(-a, b);
}

// The input indices [lo, hi] that output indices [lo, hi] of a layer depend on.
struct Span {
  int64_t lo, hi;
  Span operator|(const Span& o) const { return {std::min(lo, o.lo), std::max(hi, o.hi)}; }
};

Span through_conv(Span s, int64_t k, int64_t d, bool causal) {
  if (causal) return {s.lo - (k - 1) * d, s.hi};
  const int64_t p = d * (k - 1) / 2;
  return {s.lo - p, s.hi + p};
}

// The source samples that indices [lo, hi] of stage `i`'s source conv read.
Span source_samples(const KanTtsHifiGanConfig& c, size_t i, Span s) {
  const int64_t u = c.source_stride(i);
  if (u == 1) return s;
  if (c.causal) return {s.lo * u - (2 * u - 1), s.hi * u};
  return {s.lo * u - u / 2, s.hi * u - u / 2 + 2 * u - 1};
}

// The mel frames output sample `n` depends on (with NSF, through the source's samples too).
Span frames_of_sample(const KanTtsHifiGanConfig& c, int64_t n) {
  Span s = through_conv({n, n}, c.kernel_size, 1, c.causal);  // conv_post
  std::optional<Span> source;
  for (size_t i = c.upsample_scales.size(); i-- > 0;) {
    Span blocks = s;
    for (size_t j = 0; j < c.resblock_kernel_sizes.size(); ++j) {
      Span through = s;
      for (int64_t d : c.resblock_dilations[j]) {
        through = through_conv(through_conv(through, c.resblock_kernel_sizes[j], 1, c.causal),
                               c.resblock_kernel_sizes[j], d, c.causal);
      }
      blocks = blocks | through;
    }
    if (c.nsf) {
      const Span samples = source_samples(c, i, blocks);
      const int64_t hop = c.hop_length();
      const Span frames = {floor_div(samples.lo, hop), floor_div(samples.hi, hop)};
      source = source ? *source | frames : frames;
    }
    const int64_t scale = c.upsample_scales[i];
    const int64_t k = c.upsample_kernel_sizes[i];
    const Span conv = through_conv(blocks, c.kernel_size, 1, c.causal);
    const Span repeat = {floor_div(conv.lo, scale), floor_div(conv.hi, scale)};
    const int64_t p = c.causal ? 0 : (k - scale) / 2;
    const Span transposed = {ceil_div(blocks.lo + p - k + 1, scale),
                             floor_div(blocks.hi + p, scale)};
    s = repeat | transposed;
  }
  const Span mel = through_conv(s, c.kernel_size, 1, c.causal);  // conv_pre
  return source ? mel | *source : mel;
}

// The farthest frame, before (or after) its own, that a sample of a frame depends on.
int64_t context_frames(const KanTtsHifiGanConfig& c, bool ahead) {
  const int64_t hop = c.hop_length();
  const int64_t frame = 1 << 20;  // far from both ends, where no padding is reached
  int64_t reach = 0;
  for (int64_t n = frame * hop; n < (frame + 1) * hop; ++n) {
    const Span s = frames_of_sample(c, n);
    reach = std::max(reach, ahead ? s.hi - frame : frame - s.lo);
  }
  return reach;
}

}  // namespace

KanTtsHifiGanConfig KanTtsHifiGanConfig::from_json(const json& p, const std::string& where) {
  if (!p.is_object()) {
    throw InputError(where + ": expected Model.Generator.params as an object, got " + p.dump());
  }
  KanTtsHifiGanConfig c;
  if (p.contains("nsf_params") && !p["nsf_params"].is_null()) {
    const std::string at = where + ": nsf_params";
    c.nsf = Nsf{.harmonics = config::positive_int(p["nsf_params"], "nb_harmonics", at),
                .sampling_rate = config::positive_int(p["nsf_params"], "sampling_rate", at)};
  }
  c.in_channels = config::positive_int(p, "in_channels", where);
  if (config::positive_int(p, "out_channels", where) != 1) {
    refuse(where, "out_channels", "must be 1 (several output bands need PQMF, not supported)");
  }
  c.channels = config::positive_int(p, "channels", where);
  c.kernel_size = config::positive_int(p, "kernel_size", where);
  c.upsample_scales = config::positive_int_list(p, "upsample_scales", where);
  c.upsample_kernel_sizes = config::positive_int_list(p, "upsample_kernal_sizes", where);
  c.resblock_kernel_sizes = config::positive_int_list(p, "resblock_kernel_sizes", where);
  const json& dilations = config::require(p, "resblock_dilations", where);
  if (!dilations.is_array() || dilations.size() != c.resblock_kernel_sizes.size()) {
    refuse(where, "resblock_dilations",
           "must be a list of dilation lists, one per resblock kernel size");
  }
  for (size_t i = 0; i < dilations.size(); ++i) {
    const json wrapped = {{"d", dilations[i]}};
    c.resblock_dilations.push_back(config::positive_int_list(
        wrapped, "d", where + ": resblock_dilations[" + std::to_string(i) + "]"));
  }
  if (c.upsample_kernel_sizes.size() != c.upsample_scales.size()) {
    refuse(where, "upsample_kernal_sizes", "must have one kernel per upsample scale");
  }
  for (size_t i = 0; i < c.upsample_scales.size(); ++i) {
    if (c.upsample_kernel_sizes[i] < c.upsample_scales[i]) {
      refuse(where, "upsample_kernal_sizes",
             "holds a kernel smaller than its upsample scale (" +
                 std::to_string(c.upsample_kernel_sizes[i]) + " < " +
                 std::to_string(c.upsample_scales[i]) + ")");
    }
  }
  if ((c.channels >> c.upsample_scales.size()) < 1) {
    refuse(where, "channels", "leaves no channel after halving once per upsample stage");
  }
  require_odd({c.kernel_size}, "kernel_size", where);
  require_odd(c.resblock_kernel_sizes, "resblock_kernel_sizes", where);
  for (const char* flag : {"repeat_upsample", "causal", "bias", "use_weight_norm"}) {
    if (p.contains(flag) && !p[flag].is_boolean()) refuse(where, flag, "must be true or false");
  }
  if (p.contains("repeat_upsample") && !p["repeat_upsample"].get<bool>()) {
    refuse(where, "repeat_upsample", "is false; the original's forward fails without the branch");
  }
  if (p.contains("causal")) c.causal = p["causal"].get<bool>();
  for (size_t i = 0; c.nsf && !c.causal && i < c.upsample_scales.size(); ++i) {
    if (c.source_stride(i) > 1 && c.source_stride(i) % 2 != 0) {
      refuse(where, "upsample_scales",
             "makes the non-causal source's conv of stage " + std::to_string(i) + " stride " +
                 std::to_string(c.source_stride(i)) +
                 ", odd: its output is a sample short of the stage's and the original fails");
    }
  }
  const std::string activation = p.contains("nonlinear_activation")
                                     ? config::string(p, "nonlinear_activation", where)
                                     : "LeakyReLU";
  if (activation != "LeakyReLU") {
    refuse(where, "nonlinear_activation", "is '" + activation + "'; only LeakyReLU is supported");
  }
  // The Generator's default block is {"negative_slope": 0.1}; a block without the field gets
  // torch.nn.LeakyReLU's default, 0.01.
  c.negative_slope = 0.1f;
  if (p.contains("nonlinear_activation_params")) {
    if (!p["nonlinear_activation_params"].is_object()) {
      refuse(where, "nonlinear_activation_params", "must be a mapping");
    }
    c.negative_slope = 0.01f;
  }
  if (p.contains("nonlinear_activation_params") &&
      p["nonlinear_activation_params"].contains("negative_slope")) {
    c.negative_slope =
        static_cast<float>(config::number(p["nonlinear_activation_params"], "negative_slope",
                                          where + ": nonlinear_activation_params"));
  }
  return c;
}

int64_t KanTtsHifiGanConfig::hop_length() const {
  int64_t hop = 1;
  for (int64_t s : upsample_scales) hop *= s;
  return hop;
}

int64_t KanTtsHifiGanConfig::source_stride(size_t stage) const {
  int64_t stride = hop_length();
  for (size_t i = 0; i <= stage; ++i) stride /= upsample_scales[i];
  return stride;
}

int64_t KanTtsHifiGanConfig::left_context_frames() const {
  return context_frames(*this, false);
}

int64_t KanTtsHifiGanConfig::lookahead_frames() const {
  return context_frames(*this, true);
}

KanTtsHifiGan KanTtsHifiGan::load(Context& ctx, const KanTtsHifiGanConfig& config,
                                  const WeightSource& weights, DType dtype) {
  KanTtsHifiGan g;
  g.config_ = config;
  g.precision_ = PrecisionPolicy::for_weights(dtype);
  dtype = g.precision_.compute;
  const auto take = [&](const std::string& prefix, const Shape& shape, int64_t bias_size,
                        int64_t dilation, int64_t stride) {
    Conv c;
    c.weight = ops::to_device(ctx, load_weight_norm_parameter(weights, prefix, shape), dtype);
    c.bias = load_parameter(ctx, weights, prefix + ".bias", {bias_size}, dtype);
    c.dilation = dilation;
    c.stride = stride;
    return c;
  };
  const int64_t k = config.kernel_size;
  g.conv_pre_ =
      take("conv_pre.conv1d", {config.channels, config.in_channels, k}, config.channels, 1, 1);
  int64_t width = config.channels;
  for (size_t i = 0; i < config.upsample_scales.size(); ++i) {
    const int64_t next = width / 2;
    const std::string index = std::to_string(i);
    g.transposed_.push_back(take("transpose_upsamples." + index + ".1.deconv",
                                 {width, next, config.upsample_kernel_sizes[i]}, next, 1,
                                 config.upsample_scales[i]));
    g.repeat_convs_.push_back(
        take("repeat_upsamples." + index + ".2.conv1d", {next, width, k}, next, 1, 1));
    for (size_t j = 0; j < config.resblock_kernel_sizes.size(); ++j) {
      const std::string block =
          "conv_blocks." + std::to_string(i * config.resblock_kernel_sizes.size() + j) + ".";
      const int64_t rk = config.resblock_kernel_sizes[j];
      ResBlock r;
      for (size_t m = 0; m < config.resblock_dilations[j].size(); ++m) {
        const std::string sub = std::to_string(m) + ".conv1d";
        r.dilated.push_back(take(block + "convs1." + sub, {next, next, rk}, next,
                                 config.resblock_dilations[j][m], 1));
        r.plain.push_back(take(block + "convs2." + sub, {next, next, rk}, next, 1, 1));
      }
      g.resblocks_.push_back(std::move(r));
    }
    width = next;
  }
  g.conv_post_ = take("conv_post.conv1d", {1, width, k}, 1, 1, 1);
  if (config.nsf) {
    g.source_ = take("source_module.ffn.0", {1, config.nsf->harmonics + 1, 1}, 1, 1, 1);
    for (size_t i = 0; i < config.upsample_scales.size(); ++i) {
      const int64_t out = config.channels >> (i + 1);
      const int64_t u = config.source_stride(i);
      g.source_downs_.push_back(take("source_downs." + std::to_string(i) + ".conv1d",
                                     {out, 1, u == 1 ? 1 : 2 * u}, out, 1, u));
    }
  }
  return g;
}

Tensor KanTtsHifiGan::source_down(Context& ctx, size_t stage, const Tensor& e) const {
  const Conv& c = source_downs_[stage];
  const ConvFusion fusion{
      .input_leaky_relu = std::nullopt, .residual = nullptr, .output_dtype = precision_.stream};
  const int64_t u = c.stride;
  if (u == 1) return ops::conv1d(ctx, e, c.weight, c.bias, {}, fusion);
  if (!config_.causal) {
    return ops::conv1d(ctx, e, c.weight, c.bias, {.stride = u, .padding = u / 2}, fusion);
  }
  // 2u − 1 zeros on the left only: padded on both sides, the outputs past the stage's dropped.
  const Tensor y =
      ops::conv1d(ctx, e, c.weight, c.bias, {.stride = u, .padding = 2 * u - 1}, fusion);
  return ops::contiguous(ctx, y.narrow(2, 0, e.size(2) / u));
}

Tensor KanTtsHifiGan::conv(Context& ctx, const Conv& c, const Tensor& x, std::optional<float> slope,
                           DType out) const {
  const int64_t reach = (c.weight.size(2) - 1) * c.dilation;
  const ConvFusion fusion{.input_leaky_relu = slope, .residual = nullptr, .output_dtype = out};
  if (!config_.causal) {
    return ops::conv1d(ctx, x, c.weight, c.bias, {.padding = reach / 2, .dilation = c.dilation},
                       fusion);
  }
  // (k − 1)·d zeros on the left only: padded on both sides, the last outputs dropped.
  const Tensor y =
      ops::conv1d(ctx, x, c.weight, c.bias, {.padding = reach, .dilation = c.dilation}, fusion);
  return ops::contiguous(ctx, y.narrow(2, 0, x.size(2)));
}

Tensor KanTtsHifiGan::transposed(Context& ctx, const Conv& c, const Tensor& x) const {
  const int64_t k = c.weight.size(2);
  const int64_t padding = config_.causal ? 0 : (k - c.stride) / 2;
  const Tensor y =
      ops::conv_transpose1d(ctx, x, c.weight, c.bias, {.stride = c.stride, .padding = padding});
  return precision_.to_stream(ctx, ops::contiguous(ctx, y.narrow(2, 0, x.size(2) * c.stride)));
}

Tensor KanTtsHifiGan::forward(Context& ctx, const Tensor& mel, const Tensor& excitation) const {
  const KanTtsHifiGanConfig& c = config_;
  if (mel.dim() != 3 || mel.size(1) != c.in_channels || mel.size(2) < 1) {
    throw InputError("KAN-TTS HiFiGAN: mel must be [B, " + std::to_string(c.in_channels) +
                     ", T ≥ 1], got " + mel.shape_string());
  }
  const int64_t batch = mel.size(0);
  const DType stream = precision_.stream;
  const DType compute = precision_.compute;
  Tensor source;  // NSF: the source after its 1x1 conv and tanh, [B, 1, T · hop]
  if (c.nsf) {
    const Shape want = {batch, c.nsf->harmonics + 1, mel.size(2) * c.hop_length()};
    if (!excitation.defined() || excitation.shape() != want) {
      throw InputError("KAN-TTS HiFiGAN-NSF: the source's excitation must be " +
                       shape_to_string(want) + ", got " +
                       (excitation.defined() ? excitation.shape_string() : "none"));
    }
    const ConvFusion fusion{
        .input_leaky_relu = std::nullopt, .residual = nullptr, .output_dtype = stream};
    source = ops::tanh(ctx, ops::conv1d(ctx, ops::to_device(ctx, excitation, compute),
                                        source_.weight, source_.bias, {}, fusion));
  } else if (excitation.defined()) {
    throw InputError("KAN-TTS HiFiGAN: an excitation was given to a generator without NSF");
  }
  Tensor x = conv(ctx, conv_pre_, mel, std::nullopt, stream);
  const size_t kernels = c.resblock_kernel_sizes.size();
  for (size_t i = 0; i < c.upsample_scales.size(); ++i) {
    x = ops::add(ctx, ops::sin(ctx, x), x);
    const Tensor activated = ops::leaky_relu(ctx, x, c.negative_slope);
    // Nearest upsampling by s: each time step repeated s times.
    const std::vector<std::vector<int64_t>> repeats(
        static_cast<size_t>(batch),
        std::vector<int64_t>(static_cast<size_t>(x.size(2)), c.upsample_scales[i]));
    const Tensor upsampled = ops::transpose(
        ctx, ops::length_regulate(ctx, ops::transpose(ctx, activated, 1, 2), repeats), 1, 2);
    x = conv(ctx, repeat_convs_[i], upsampled, std::nullopt, stream);
    if (c.nsf) ops::add_(ctx, x, source_down(ctx, i, source));
    ops::add_(ctx, x, transposed(ctx, transposed_[i], precision_.to_compute(ctx, activated)));
    Tensor sum;
    for (size_t j = 0; j < kernels; ++j) {
      const ResBlock& block = resblocks_[i * kernels + j];
      Tensor y = x;
      for (size_t m = 0; m < block.dilated.size(); ++m) {
        const Tensor inner = conv(ctx, block.dilated[m], y, c.negative_slope, compute);
        y = ops::add(ctx, y, conv(ctx, block.plain[m], inner, c.negative_slope, stream));
      }
      sum = j == 0 ? y : ops::add(ctx, sum, y);
    }
    x = ops::scale(ctx, sum, 1.0f / static_cast<float>(kernels));
  }
  const Tensor audio = ops::tanh(ctx, conv(ctx, conv_post_, x, kFinalSlope, stream));
  return audio.reshape({batch, audio.size(2)});
}

namespace {

constexpr double kSourceAlpha = 0.1;    // SourceModule's alpha
constexpr double kSourceSigma = 0.003;  // and sigma
constexpr double kPi = 3.14159265358979323846;

// splitmix64's finaliser: a well-mixed 64-bit hash of x.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A uniform double in (0, 1) from a hash.
double unit(uint64_t h) {
  return (static_cast<double>(h >> 11) + 0.5) * 0x1.0p-53;
}

}  // namespace

NsfSource::NsfSource(const KanTtsHifiGanConfig& config, uint64_t seed)
    : harmonics_(config.nsf ? config.nsf->harmonics : 0),
      hop_(config.hop_length()),
      rate_(config.nsf ? config.nsf->sampling_rate : 1),
      seed_key_(mix(seed)) {
  VOXD_CHECK(config.nsf.has_value(), "NsfSource for a generator without NSF");
  phases_.push_back(0.0f);
  for (int64_t h = 1; h <= harmonics_; ++h) {
    const double u = unit(mix(seed_key_ ^ mix(0x5048415345ull + static_cast<uint64_t>(h))));
    phases_.push_back(static_cast<float>(-kPi + 2.0 * kPi * u));
  }
}

NsfSource::NsfSource(const KanTtsHifiGanConfig& config, std::vector<float> phases, Tensor noise)
    : harmonics_(config.nsf ? config.nsf->harmonics : 0),
      hop_(config.hop_length()),
      rate_(config.nsf ? config.nsf->sampling_rate : 1),
      phases_(std::move(phases)),
      noise_(noise.to_host_contiguous(DType::F32)) {
  VOXD_CHECK(config.nsf.has_value(), "NsfSource for a generator without NSF");
  VOXD_CHECK(static_cast<int64_t>(phases_.size()) == harmonics_ + 1 && noise_.dim() == 2 &&
                 noise_.size(0) == harmonics_ + 1,
             "NsfSource: phases [harmonics + 1] and noise [harmonics + 1, samples]");
  phases_[0] = 0.0f;
}

std::array<float, 2> NsfSource::noise_pair(int64_t h, int64_t sample) const {
  if (noise_.defined()) {
    VOXD_CHECK(sample < noise_.size(1), "NsfSource: past the given noise");
    const float* at = noise_.data<float>() + h * noise_.size(1) + sample;
    return {at[0], h < harmonics_ ? at[noise_.size(1)] : 0.0f};
  }
  // Box-Muller over two hashes of (seed, harmonic pair, sample).
  const uint64_t key =
      seed_key_ ^ mix((static_cast<uint64_t>(h / 2) << 56) ^ static_cast<uint64_t>(sample));
  const double radius = kSourceSigma * std::sqrt(-2.0 * std::log(unit(mix(key))));
  const double angle = 2.0 * kPi * unit(mix(key ^ 0xA5A5A5A5A5A5A5A5ull));
  return {static_cast<float>(radius * std::cos(angle)),
          static_cast<float>(radius * std::sin(angle))};
}

std::vector<float> NsfSource::excitation(const float* f0, const float* voiced, int64_t first,
                                         int64_t frames, double f0_before) const {
  const int64_t samples = frames * hop_;
  std::vector<float> out(static_cast<size_t>((harmonics_ + 1) * samples));
  const auto alpha = static_cast<float>(kSourceAlpha);
  const auto unvoiced_gain = static_cast<float>(kSourceAlpha / 3.0 / kSourceSigma);
  // Σ f0 over the utterance's samples so far (each frame's f0 over its hop samples).
  double sum = f0_before * static_cast<double>(hop_);
  for (int64_t f = 0; f < frames; ++f) {
    const float v = voiced[f];
    for (int64_t k = 0; k < hop_; ++k) {
      sum += f0[f];
      const int64_t n = (first + f) * hop_ + k;
      std::array<float, 2> pair{};
      for (int64_t h = 0; h <= harmonics_; ++h) {
        if (h % 2 == 0) pair = noise_pair(h, n);
        const float eps = pair[static_cast<size_t>(h % 2)];
        const double cycles = sum * static_cast<double>(h + 1) / static_cast<double>(rate_);
        const auto theta = static_cast<float>(2.0 * kPi * (cycles - std::floor(cycles)));
        const float e_voice = alpha * std::sin(theta + phases_[static_cast<size_t>(h)]) + eps;
        out[static_cast<size_t>(h * samples + f * hop_ + k)] =
            e_voice * v + unvoiced_gain * eps * (1.0f - v);
      }
    }
  }
  return out;
}

}  // namespace voxd
