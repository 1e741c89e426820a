#include "core/ops.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace voxd::ops {
namespace {

[[noreturn]] void fail(const char* op, const std::string& message) {
  throw Error(std::string(op) + ": " + message);
}

void require_defined(const char* op, const char* name, const Tensor& t) {
  if (!t.defined()) fail(op, std::string(name) + " is undefined");
}

void require_rank(const char* op, const char* name, const Tensor& t, int64_t rank) {
  require_defined(op, name, t);
  if (t.dim() != rank) {
    fail(op, std::string(name) + " must have rank " + std::to_string(rank) + ", got " +
                 t.shape_string());
  }
}

void require_on_device(Context& ctx, const char* op, const char* name, const Tensor& t) {
  if (t.device() != ctx.device()) {
    fail(op, std::string(name) + " " + t.shape_string() + " is on " + t.device().to_string() +
                 " but the backend '" + ctx.backend().name() + "' runs on " +
                 ctx.device().to_string());
  }
}

void require_floating(const char* op, const char* name, const Tensor& t) {
  if (!is_floating(t.dtype())) {
    fail(op, std::string(name) + " " + t.shape_string() + " has dtype " +
                 std::string(dtype_name(t.dtype())) + ", expected a floating dtype");
  }
}

// A floating tensor on the context's device.
void require_float_input(Context& ctx, const char* op, const char* name, const Tensor& t) {
  require_defined(op, name, t);
  require_on_device(ctx, op, name, t);
  require_floating(op, name, t);
}

// The context's allocator holds memory of the backend's device (outputs and kernel scratch come
// from it).
void require_allocator(Context& ctx, const char* op) {
  if (ctx.allocator().device() != ctx.device()) {
    fail(op, "the context's allocator holds " + ctx.allocator().device().to_string() +
                 " memory, but the backend '" + ctx.backend().name() + "' runs on " +
                 ctx.device().to_string() + "; outputs and kernel scratch must be " +
                 ctx.device().to_string() + " memory");
  }
}

// The one gate before a kernel: the allocator's device, and the backend running `kind` on
// operands of `dtype`.
void require_backend(Context& ctx, const char* op, OpKind kind, DType dtype) {
  require_allocator(ctx, op);
  if (!ctx.backend().supports(kind, dtype)) {
    fail(op, "the backend '" + ctx.backend().name() + "' does not run " +
                 std::string(op_name(kind)) + " on " + std::string(dtype_name(dtype)) + " tensors");
  }
}

// A copy's source: on the host or on the context's device.
void require_copyable(Context& ctx, const char* op, const Tensor& x) {
  require_defined(op, "x", x);
  if (!x.device().is_cpu() && x.device() != ctx.device()) {
    fail(op, "x " + x.shape_string() + " is on " + x.device().to_string() + "; the backend '" +
                 ctx.backend().name() + "' copies from the host or " + ctx.device().to_string());
  }
  require_allocator(ctx, op);
}

void require_same_dtype(const char* op, const char* name, const Tensor& t, const Tensor& ref) {
  if (t.dtype() != ref.dtype()) {
    fail(op, std::string(name) + " has dtype " + std::string(dtype_name(t.dtype())) + ", x has " +
                 std::string(dtype_name(ref.dtype())));
  }
}

// An optional bias [n] (undefined allowed) of the dtype of `ref` (named ref_name), made
// contiguous.
Tensor check_bias(Context& ctx, const char* op, const Tensor& bias, int64_t n, const Tensor& ref,
                  const char* ref_name = "x") {
  if (!bias.defined()) return bias;
  require_float_input(ctx, op, "bias", bias);
  if (bias.dtype() != ref.dtype()) {
    fail(op, "bias has dtype " + std::string(dtype_name(bias.dtype())) + ", " + ref_name + " has " +
                 std::string(dtype_name(ref.dtype())));
  }
  if (bias.dim() != 1 || bias.size(0) != n) {
    fail(op, "bias " + bias.shape_string() + " should be [" + std::to_string(n) + "]");
  }
  return contiguous(ctx, bias);
}

// Rope's base: positive and finite.
void require_rope_theta(const char* op, float theta) {
  if (!(theta > 0.0f) || !std::isfinite(theta)) {
    fail(op, "theta must be a positive finite base (Llama: 10000), got " + std::to_string(theta));
  }
}

// A paged KV cache's two page tensors [N, S, H, D] (contiguous, pages of at least one position)
// for heads of the layout of `input` (named `name`, described as `layout`), whose sizes H and D
// are its dims h_dim and h_dim + 1; `use` says what the op does with the pages.
void check_kv_pages(const char* op, const Tensor& k_pages, const Tensor& v_pages,
                    const Tensor& input, const char* name, const char* layout, int64_t h_dim,
                    const char* use) {
  require_rank(op, "k_pages", k_pages, 4);
  if (k_pages.shape() != v_pages.shape() || k_pages.size(2) != input.size(h_dim) ||
      k_pages.size(3) != input.size(h_dim + 1) || k_pages.size(1) < 1) {
    fail(op, std::string(layout) + ", k_pages and v_pages [N, S, H, D] do not match: " + name +
                 " " + input.shape_string() + ", k_pages " + k_pages.shape_string() + ", v_pages " +
                 v_pages.shape_string());
  }
  if (!k_pages.is_contiguous() || !v_pages.is_contiguous()) {
    fail(op, std::string("the pages are ") + use + " in place and must be contiguous");
  }
}

void require_writable_contiguous(const char* op, const Tensor& x) {
  if (!x.is_contiguous()) {
    fail(op, "in-place operation needs a contiguous tensor, x is " + x.shape_string() +
                 " with strides " + shape_to_string(x.strides()));
  }
}

Tensor unary_op(Context& ctx, const char* op, const Tensor& x, UnaryOp kind, float alpha) {
  require_float_input(ctx, op, "x", x);
  require_backend(ctx, op, op_kind(kind), x.dtype());
  Tensor in = contiguous(ctx, x);
  Tensor out = empty(ctx, x.shape(), x.dtype());
  if (!ctx.planning()) ctx.backend().unary(in, out, kind, alpha);
  return out;
}

Tensor& unary_inplace(Context& ctx, const char* op, Tensor& x, UnaryOp kind, float alpha) {
  require_float_input(ctx, op, "x", x);
  require_writable_contiguous(op, x);
  require_backend(ctx, op, op_kind(kind), x.dtype());
  if (!ctx.planning()) ctx.backend().unary(x, x, kind, alpha);
  return x;
}

// b made contiguous and, when it has fewer dimensions than a, viewed with leading 1s.
Tensor broadcast_operand(Context& ctx, const char* op, const Tensor& a, const Tensor& b) {
  require_float_input(ctx, op, "a", a);
  require_float_input(ctx, op, "b", b);
  require_same_dtype(op, "b", b, a);
  if (b.dim() > a.dim()) {
    fail(op, "b " + b.shape_string() + " has more dimensions than a " + a.shape_string());
  }
  Tensor bc = contiguous(ctx, b);
  Shape padded(static_cast<size_t>(a.dim() - b.dim()), 1);
  padded.insert(padded.end(), b.shape().begin(), b.shape().end());
  for (size_t i = 0; i < padded.size(); ++i) {
    if (padded[i] != 1 && padded[i] != a.shape()[i]) {
      fail(op, "cannot broadcast b " + b.shape_string() + " to a " + a.shape_string());
    }
  }
  return bc.reshape(padded);
}

Tensor binary_op(Context& ctx, const char* op, const Tensor& a, const Tensor& b, BinaryOp kind) {
  Tensor bb = broadcast_operand(ctx, op, a, b);
  require_backend(ctx, op, op_kind(kind), a.dtype());
  Tensor ac = contiguous(ctx, a);
  Tensor out = empty(ctx, a.shape(), a.dtype());
  if (!ctx.planning()) ctx.backend().binary(ac, bb, out, kind);
  return out;
}

// A per-sequence list given as a tensor (`name`): contiguous I64 [batch] on the host or ctx's
// device.
void require_sequence_tensor(Context& ctx, const char* op, const char* name, const Tensor& values,
                             int64_t batch) {
  if (values.dtype() != DType::I64 || !values.is_contiguous() || values.shape() != Shape{batch}) {
    fail(op, std::string(name) + " must be contiguous I64 [B] = [" + std::to_string(batch) +
                 "], got " + std::string(dtype_name(values.dtype())) + " " + values.shape_string());
  }
  if (!values.device().is_cpu() && values.device() != ctx.device()) {
    fail(op, std::string(name) + " is on " + values.device().to_string() + "; the backend '" +
                 ctx.backend().name() + "' reads it from the host or " + ctx.device().to_string());
  }
}

}  // namespace

Tensor empty(Context& ctx, const Shape& shape, DType dtype) {
  return Tensor::empty(shape, dtype, ctx.allocator());
}

Tensor zeros(Context& ctx, const Shape& shape, DType dtype) {
  require_allocator(ctx, "zeros");
  Tensor t = empty(ctx, shape, dtype);
  if (!ctx.planning()) ctx.backend().fill(t, 0.0f);
  return t;
}

Tensor to_device(Context& ctx, const Tensor& x, DType dtype) {
  require_copyable(ctx, "to_device", x);
  Tensor out = empty(ctx, x.shape(), dtype);
  ctx.backend().copy(x, out, ctx.scratch());
  return out;
}

Tensor to_host(Context& ctx, const Tensor& x, DType dtype) {
  require_copyable(ctx, "to_host", x);
  // A planning pass copies nothing, so its host copies are zeros.
  Tensor out = ctx.planning() ? Tensor::zeros(x.shape(), dtype, host_allocator())
                              : Tensor::empty(x.shape(), dtype, host_allocator());
  ctx.backend().copy(x, out, ctx.scratch());
  return out;
}

Tensor contiguous(Context& ctx, const Tensor& x) {
  require_defined("contiguous", "x", x);
  if (x.is_contiguous()) return x;
  require_on_device(ctx, "contiguous", "x", x);
  require_allocator(ctx, "contiguous");
  Tensor out = empty(ctx, x.shape(), x.dtype());
  ctx.backend().copy(x, out, ctx.scratch());
  return out;
}

Tensor relu(Context& ctx, const Tensor& x) {
  return unary_op(ctx, "relu", x, UnaryOp::Relu, 0.0f);
}

Tensor leaky_relu(Context& ctx, const Tensor& x, float slope) {
  return unary_op(ctx, "leaky_relu", x, UnaryOp::LeakyRelu, slope);
}

Tensor tanh(Context& ctx, const Tensor& x) {
  return unary_op(ctx, "tanh", x, UnaryOp::Tanh, 0.0f);
}

Tensor exp(Context& ctx, const Tensor& x) {
  return unary_op(ctx, "exp", x, UnaryOp::Exp, 0.0f);
}

Tensor scale(Context& ctx, const Tensor& x, float factor) {
  return unary_op(ctx, "scale", x, UnaryOp::Scale, factor);
}

Tensor silu(Context& ctx, const Tensor& x) {
  return unary_op(ctx, "silu", x, UnaryOp::Silu, 0.0f);
}

Tensor gelu(Context& ctx, const Tensor& x) {
  return unary_op(ctx, "gelu", x, UnaryOp::Gelu, 0.0f);
}

Tensor sin(Context& ctx, const Tensor& x) {
  return unary_op(ctx, "sin", x, UnaryOp::Sin, 0.0f);
}

Tensor cos(Context& ctx, const Tensor& x) {
  return unary_op(ctx, "cos", x, UnaryOp::Cos, 0.0f);
}

Tensor clamp_max(Context& ctx, const Tensor& x, float max) {
  return unary_op(ctx, "clamp_max", x, UnaryOp::ClampMax, max);
}

Tensor& relu_(Context& ctx, Tensor& x) {
  return unary_inplace(ctx, "relu_", x, UnaryOp::Relu, 0);
}

Tensor& leaky_relu_(Context& ctx, Tensor& x, float slope) {
  return unary_inplace(ctx, "leaky_relu_", x, UnaryOp::LeakyRelu, slope);
}

Tensor& add_scale_leaky_relu_(Context& ctx, Tensor& x, const Tensor* addend, float factor,
                              std::optional<float> slope) {
  if (addend != nullptr) add_(ctx, x, *addend);
  if (factor != 1.0f) unary_inplace(ctx, "scale_", x, UnaryOp::Scale, factor);
  if (slope) leaky_relu_(ctx, x, *slope);
  return x;
}

Tensor add(Context& ctx, const Tensor& a, const Tensor& b) {
  return binary_op(ctx, "add", a, b, BinaryOp::Add);
}

Tensor mul(Context& ctx, const Tensor& a, const Tensor& b) {
  return binary_op(ctx, "mul", a, b, BinaryOp::Mul);
}

Tensor& add_(Context& ctx, Tensor& a, const Tensor& b) {
  Tensor bb = broadcast_operand(ctx, "add_", a, b);
  require_writable_contiguous("add_", a);
  require_backend(ctx, "add_", OpKind::Add, a.dtype());
  if (bb.storage() == a.storage()) bb = to_device(ctx, bb, bb.dtype());
  if (!ctx.planning()) ctx.backend().binary(a, bb, a, BinaryOp::Add);
  return a;
}

Tensor linear(Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const char* op = "linear";
  require_float_input(ctx, op, "x", x);
  require_float_input(ctx, op, "weight", weight);
  require_same_dtype(op, "weight", weight, x);
  if (x.dim() < 1) fail(op, "x must have at least one dimension, got " + x.shape_string());
  require_rank(op, "weight", weight, 2);
  const int64_t in = weight.size(1);
  const int64_t out_features = weight.size(0);
  if (x.size(-1) != in) {
    fail(op, "weight " + weight.shape_string() + " expects " + std::to_string(in) +
                 " input features, x is " + x.shape_string());
  }
  Tensor b = check_bias(ctx, op, bias, out_features, x);
  require_backend(ctx, op, OpKind::Linear, x.dtype());
  Tensor x2 = contiguous(ctx, x).reshape({-1, in});
  Shape out_shape = x.shape();
  out_shape.back() = out_features;
  Tensor out = empty(ctx, {x2.size(0), out_features}, x.dtype());
  ctx.backend().linear(x2, contiguous(ctx, weight), b, out, ctx.scratch());
  return out.reshape(out_shape);
}

namespace {

// Checks conv1d's arguments (throwing as the op does) and returns its output's time steps.
// Checks x and weight (floating point, of any dtypes) and params; returns the output steps.
int64_t conv1d_output_steps(Context& ctx, const Tensor& x, const Tensor& weight,
                            const Conv1dParams& params) {
  const char* op = "conv1d";
  require_float_input(ctx, op, "x", x);
  require_float_input(ctx, op, "weight", weight);
  require_rank(op, "x", x, 3);
  require_rank(op, "weight", weight, 3);
  if (params.stride < 1 || params.dilation < 1 || params.padding < 0 || params.groups < 1) {
    fail(op, "needs stride >= 1, dilation >= 1, padding >= 0, groups >= 1; got stride " +
                 std::to_string(params.stride) + ", dilation " + std::to_string(params.dilation) +
                 ", padding " + std::to_string(params.padding) + ", groups " +
                 std::to_string(params.groups));
  }
  const int64_t cin = x.size(1);
  const int64_t cout = weight.size(0);
  const int64_t k = weight.size(2);
  const int64_t g = params.groups;
  if (cin % g != 0 || cout % g != 0) {
    fail(op, "groups " + std::to_string(g) + " must divide the input channels of x " +
                 x.shape_string() + " and the output channels of weight " + weight.shape_string());
  }
  if (weight.size(1) * g != cin) {
    fail(op, "weight " + weight.shape_string() + " expects " + std::to_string(weight.size(1) * g) +
                 " input channels, x is " + x.shape_string());
  }
  if (k < 1) fail(op, "weight " + weight.shape_string() + " has an empty kernel");
  const int64_t span = params.dilation * (k - 1) + 1;
  const int64_t padded = x.size(2) + 2 * params.padding;
  if (padded < span) {
    fail(op, "input x " + x.shape_string() + " with padding " + std::to_string(params.padding) +
                 " is shorter than the dilated kernel (" + std::to_string(span) + " samples)");
  }
  return (padded - span) / params.stride + 1;
}

// A tensor added to a fused convolution's output (`what`: its residual, a pair's addend) must
// have the output's dtype and shape.
void check_output_term(Context& ctx, const char* op, const char* what, const Tensor* term,
                       DType out_dtype, const Shape& shape) {
  if (term == nullptr) return;
  require_float_input(ctx, op, what, *term);
  if (term->dtype() != out_dtype) {
    fail(op, std::string(what) + " has dtype " + std::string(dtype_name(term->dtype())) +
                 ", the output " + std::string(dtype_name(out_dtype)));
  }
  if (term->shape() != shape) {
    fail(op, std::string(what) + " " + term->shape_string() + " does not match the output " +
                 shape_to_string(shape));
  }
}

// The output dtype of a fused convolution (output_dtype, else x's) with output `shape`, after
// checking that it is floating and that the residual, when there is one, matches it.
DType fused_output_dtype(Context& ctx, const char* op, const Tensor& x,
                         std::optional<DType> output_dtype, const Tensor* residual,
                         const Shape& shape) {
  const DType out_dtype = output_dtype.value_or(x.dtype());
  if (!is_floating(out_dtype)) {
    fail(op, "output dtype " + std::string(dtype_name(out_dtype)) + " is not F32, F16 or BF16");
  }
  check_output_term(ctx, op, "residual", residual, out_dtype, shape);
  return out_dtype;
}

}  // namespace

Tensor conv1d(Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias,
              const Conv1dParams& params) {
  const int64_t tout = conv1d_output_steps(ctx, x, weight, params);
  require_same_dtype("conv1d", "weight", weight, x);
  Tensor b = check_bias(ctx, "conv1d", bias, weight.size(0), x);
  require_backend(ctx, "conv1d", OpKind::Conv1d, x.dtype());
  Tensor out = empty(ctx, {x.size(0), weight.size(0), tout}, x.dtype());
  ctx.backend().conv1d(contiguous(ctx, x), contiguous(ctx, weight), b, out, params, ctx.scratch());
  return out;
}

namespace {

// An arranged weight: null, ignored by a backend that arranges none (`elements` 0: one that
// wraps another may run a model loaded on it), else `maker`'s for `weight` here.
void check_arrangement(Context& ctx, const char* op, const std::string& which,
                       const Tensor* arranged, const Tensor& weight, int64_t elements,
                       const char* maker) {
  if (arranged == nullptr || elements == 0) return;
  if (arranged->defined() && arranged->dim() == 1 && arranged->numel() == elements &&
      arranged->dtype() == weight.dtype() && arranged->device() == ctx.device()) {
    return;
  }
  fail(op, "the " + which + "arrangement " +
               (arranged->defined() ? arranged->shape_string() : "(undefined)") +
               " is not this backend's for weight " + weight.shape_string() + " (" +
               std::to_string(elements) + " " + std::string(dtype_name(weight.dtype())) +
               " elements on " + ctx.device().to_string() + "); make it with " + maker);
}

// A pair's arranged weight (check_arrangement).
void check_arranged(Context& ctx, const char* op, const char* which, const Tensor* arranged,
                    const Tensor& weight) {
  check_arrangement(ctx, op, std::string(which) + " weight's ", arranged, weight,
                    ctx.backend().arranged_conv1d_weight_elements(weight),
                    "ops::arrange_conv1d_weight");
}

}  // namespace

Tensor conv1d(Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias,
              const Conv1dParams& params, const ConvFusion& fusion) {
  const char* op = "conv1d";
  const int64_t tout = conv1d_output_steps(ctx, x, weight, params);
  const Shape shape = {x.size(0), weight.size(0), tout};
  const DType out_dtype =
      fused_output_dtype(ctx, op, x, fusion.output_dtype, fusion.residual, shape);
  Tensor b = check_bias(ctx, op, bias, weight.size(0), weight, "weight");
  require_backend(ctx, op, OpKind::Conv1d, weight.dtype());
  const int64_t arranged_elements = ctx.backend().arranged_conv1d_weight_elements(weight);
  check_arrangement(ctx, op, "weight's ", fusion.arranged_weight, weight, arranged_elements,
                    "ops::arrange_conv1d_weight");
  const Tensor* arranged = arranged_elements > 0 ? fusion.arranged_weight : nullptr;
  const Tensor xc = contiguous(ctx, x);
  const Tensor wc = contiguous(ctx, weight);
  if (ctx.backend().fuses_conv1d(xc, wc, out_dtype, params, arranged != nullptr)) {
    const Tensor residual = fusion.residual ? contiguous(ctx, *fusion.residual) : Tensor();
    ConvFusion fused = fusion;
    fused.residual = fusion.residual ? &residual : nullptr;
    fused.arranged_weight = arranged;
    Tensor out = empty(ctx, shape, out_dtype);
    ctx.backend().fused_conv1d(xc, wc, b, fused, out, params, ctx.scratch());
    return out;
  }
  Tensor input = fusion.input_leaky_relu ? leaky_relu(ctx, xc, *fusion.input_leaky_relu) : xc;
  if (input.dtype() != wc.dtype()) input = to_device(ctx, input, wc.dtype());
  Tensor y = conv1d(ctx, input, wc, b, params);
  input = Tensor();  // dead before the output's conversion is allocated
  if (y.dtype() != out_dtype) y = to_device(ctx, y, out_dtype);
  if (fusion.residual) add_(ctx, y, *fusion.residual);
  return y;
}

Tensor conv1d_rows(Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias,
                   const Conv1dParams& params, const Tensor* arranged, RowsActivation activation) {
  const char* op = "conv1d_rows";
  require_float_input(ctx, op, "x", x);
  require_rank(op, "x", x, 3);
  // Checked as conv1d checks its x [B, Cin, T]: the rows with time and channels swapped.
  const Tensor channel_major = x.transpose(1, 2);
  const int64_t tout = conv1d_output_steps(ctx, channel_major, weight, params);
  require_same_dtype(op, "weight", weight, x);
  Tensor b = check_bias(ctx, op, bias, weight.size(0), x);
  require_backend(ctx, op, OpKind::Conv1d, x.dtype());
  const int64_t elements = ctx.backend().arranged_conv1d_rows_elements(weight, params);
  check_arrangement(ctx, op, "weight's ", arranged, weight, elements,
                    "ops::arrange_conv1d_rows_weight");
  const bool relu = activation == RowsActivation::Relu;
  const auto activated = [&](Tensor out) {
    if (relu) relu_(ctx, out);
    return out;
  };
  if (weight.size(2) == 1 && params.padding == 0 && params.stride == 1 && params.groups == 1) {
    // Pointwise: a linear layer over the rows on every backend.
    return activated(
        linear(ctx, x, contiguous(ctx, weight).reshape({weight.size(0), weight.size(1)}), b));
  }
  if (!ctx.backend().runs_conv1d_rows(x, weight, params)) {
    return activated(transpose(ctx, conv1d(ctx, channel_major, weight, b, params), 1, 2));
  }
  Tensor out = empty(ctx, {x.size(0), tout, weight.size(0)}, x.dtype());
  // With its arrangement the backend reads only the weight's shape: a view of the arrangement
  // (conv1d_rows_weight_view) is passed as it is.
  const Tensor* taken = elements > 0 ? arranged : nullptr;
  ctx.backend().conv1d_rows(contiguous(ctx, x), taken ? weight : contiguous(ctx, weight), b, out,
                            params, taken, relu, ctx.scratch());
  return out;
}

Tensor arrange_conv1d_rows_weight(Context& ctx, const Tensor& weight, const Conv1dParams& params) {
  const char* op = "arrange_conv1d_rows_weight";
  require_rank(op, "weight", weight, 3);
  require_on_device(ctx, op, "weight", weight);
  const int64_t elements = ctx.backend().arranged_conv1d_rows_elements(weight, params);
  if (elements == 0) return Tensor();
  Tensor arranged = empty(ctx, {elements}, weight.dtype());
  ctx.backend().arrange_conv1d_rows_weight(contiguous(ctx, weight), params, arranged,
                                           ctx.scratch());
  return arranged;
}

Tensor conv1d_rows_weight_view(Context& ctx, const Tensor& arranged, const Tensor& weight,
                               const Conv1dParams& params) {
  const char* op = "conv1d_rows_weight_view";
  require_rank(op, "weight", weight, 3);
  if (!arranged.defined()) return weight;
  const std::vector<int64_t> order = ctx.backend().arranged_conv1d_rows_order(weight, params);
  if (order.empty()) return weight;
  check_arrangement(ctx, op, "weight's ", &arranged, weight,
                    ctx.backend().arranged_conv1d_rows_elements(weight, params),
                    "ops::arrange_conv1d_rows_weight");
  Shape permuted(order.size());
  std::vector<int64_t> back(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    permuted[i] = weight.size(order[i]);
    back[static_cast<size_t>(order[i])] = static_cast<int64_t>(i);
  }
  return arranged.reshape(permuted).permute(back);
}

namespace {

// A Conv1dPair checked over channel-major x [B, C, T] (a view is fine) with `residual` (a view
// of [B, Cout, T], or null): its weights and biases made contiguous, the output's shape and
// dtype. Throws as conv1d_pair documents.
struct CheckedPair {
  Tensor w1, w2, b1, b2;
  Shape shape;  // [B, Cout, T]
  DType out_dtype = DType::F32;
};

CheckedPair check_pair(Context& ctx, const char* op, const Tensor& x, const Conv1dPair& pair,
                       const Tensor* residual, const Tensor* addend) {
  if (pair.first_weight == nullptr || pair.second_weight == nullptr) {
    fail(op, "needs the weights of both convolutions");
  }
  const Tensor& w1 = *pair.first_weight;
  const Tensor& w2 = *pair.second_weight;
  const int64_t steps = conv1d_output_steps(ctx, x, w1, pair.first);
  require_float_input(ctx, op, "second weight", w2);
  require_rank(op, "second weight", w2, 3);
  if (w2.dtype() != w1.dtype()) {
    fail(op, "the second weight has dtype " + std::string(dtype_name(w2.dtype())) + ", the first " +
                 std::string(dtype_name(w1.dtype())));
  }
  if (w2.size(1) != w1.size(0)) {
    fail(op, "the second weight " + w2.shape_string() + " expects " + std::to_string(w2.size(1)) +
                 " input channels, the first convolution makes " + std::to_string(w1.size(0)));
  }
  const auto require_same_length = [&](const char* which, const Tensor& w, const Conv1dParams& p) {
    if (p.stride != 1 || p.groups != 1 || 2 * p.padding != p.dilation * (w.size(2) - 1)) {
      fail(op, std::string("the ") + which +
                   " convolution must keep the sequence's length (stride 1, groups 1, 2 · padding "
                   "= dilation · (K − 1)); got stride " +
                   std::to_string(p.stride) + ", groups " + std::to_string(p.groups) +
                   ", padding " + std::to_string(p.padding) + ", dilation " +
                   std::to_string(p.dilation) + ", K " + std::to_string(w.size(2)));
    }
  };
  require_same_length("first", w1, pair.first);
  require_same_length("second", w2, pair.second);
  CheckedPair checked;
  checked.shape = {x.size(0), w2.size(0), steps};
  checked.out_dtype = fused_output_dtype(ctx, op, x, pair.output_dtype, residual, checked.shape);
  check_output_term(ctx, op, "addend", addend, checked.out_dtype, checked.shape);
  const Tensor none;
  checked.b1 = check_bias(ctx, op, pair.first_bias ? *pair.first_bias : none, w1.size(0), w1,
                          "the first weight");
  checked.b2 = check_bias(ctx, op, pair.second_bias ? *pair.second_bias : none, w2.size(0), w2,
                          "the second weight");
  require_backend(ctx, op, OpKind::Conv1d, w1.dtype());
  check_arranged(ctx, op, "first", pair.first_arranged, w1);
  check_arranged(ctx, op, "second", pair.second_arranged, w2);
  checked.w1 = contiguous(ctx, w1);
  checked.w2 = contiguous(ctx, w2);
  return checked;
}

// `pair` with the checked weights and biases, and `residual` and `addend` in place of its own.
Conv1dPair with_checked(const Conv1dPair& pair, const CheckedPair& checked, const Tensor* residual,
                        const Tensor* addend) {
  Conv1dPair fused = pair;
  fused.first_weight = &checked.w1;
  fused.first_bias = &checked.b1;
  fused.second_weight = &checked.w2;
  fused.second_bias = &checked.b2;
  fused.residual = residual;
  fused.addend = addend;
  return fused;
}

}  // namespace

Tensor conv1d_pair(Context& ctx, const Tensor& x, const Conv1dPair& pair) {
  const char* op = "conv1d_pair";
  const CheckedPair checked = check_pair(ctx, op, x, pair, pair.residual, pair.addend);
  const Tensor xc = contiguous(ctx, x);
  const Tensor residual = pair.residual ? contiguous(ctx, *pair.residual) : Tensor();
  const Tensor addend = pair.addend ? contiguous(ctx, *pair.addend) : Tensor();
  const Conv1dPair fused = with_checked(pair, checked, pair.residual ? &residual : nullptr,
                                        pair.addend ? &addend : nullptr);
  if (ctx.backend().fuses_conv1d_pair(xc, fused, checked.out_dtype)) {
    Tensor out = empty(ctx, checked.shape, checked.out_dtype);
    ctx.backend().fused_conv1d_pair(xc, fused, out, ctx.scratch());
    return out;
  }
  const Tensor h = conv1d(ctx, xc, checked.w1, checked.b1, pair.first,
                          {pair.slope, nullptr, checked.w1.dtype()});
  Tensor out = conv1d(ctx, h, checked.w2, checked.b2, pair.second,
                      {pair.slope, fused.residual, checked.out_dtype});
  return add_scale_leaky_relu_(ctx, out, fused.addend, pair.output_scale, pair.output_slope);
}

Tensor conv1d_pair_rows(Context& ctx, const Tensor& x, const Conv1dPair& pair) {
  const char* op = "conv1d_pair_rows";
  require_rank(op, "x", x, 3);
  if (pair.residual != nullptr) require_rank(op, "residual", *pair.residual, 3);
  if (pair.addend != nullptr) require_rank(op, "addend", *pair.addend, 3);
  const Tensor channel_major = x.transpose(1, 2);
  const Tensor residual_view = pair.residual ? pair.residual->transpose(1, 2) : Tensor();
  const Tensor addend_view = pair.addend ? pair.addend->transpose(1, 2) : Tensor();
  const CheckedPair checked =
      check_pair(ctx, op, channel_major, pair, pair.residual ? &residual_view : nullptr,
                 pair.addend ? &addend_view : nullptr);
  const Tensor xc = contiguous(ctx, x);
  const Tensor residual = pair.residual ? contiguous(ctx, *pair.residual) : Tensor();
  const Tensor addend = pair.addend ? contiguous(ctx, *pair.addend) : Tensor();
  const Conv1dPair fused = with_checked(pair, checked, pair.residual ? &residual : nullptr,
                                        pair.addend ? &addend : nullptr);
  if (ctx.backend().fuses_conv1d_pair_rows(xc, fused, checked.out_dtype)) {
    Tensor out =
        empty(ctx, {checked.shape[0], checked.shape[2], checked.shape[1]}, checked.out_dtype);
    ctx.backend().fused_conv1d_pair_rows(xc, fused, out, ctx.scratch());
    return out;
  }
  const Conv1dPair channel_pair =
      with_checked(pair, checked, pair.residual ? &residual_view : nullptr,
                   pair.addend ? &addend_view : nullptr);
  return transpose(ctx, conv1d_pair(ctx, channel_major, channel_pair), 1, 2);
}

bool fuses_conv1d_pair_rows(Context& ctx, const Tensor& x, const Conv1dPair& pair) {
  return x.dim() == 3 && pair.first_weight != nullptr && pair.second_weight != nullptr &&
         ctx.backend().fuses_conv1d_pair_rows(x, pair, pair.output_dtype.value_or(x.dtype()));
}

Tensor arrange_conv1d_weight(Context& ctx, const Tensor& weight) {
  const char* op = "arrange_conv1d_weight";
  require_rank(op, "weight", weight, 3);
  require_on_device(ctx, op, "weight", weight);
  const int64_t elements = ctx.backend().arranged_conv1d_weight_elements(weight);
  if (elements == 0) return Tensor();
  const Tensor wc = contiguous(ctx, weight);
  Tensor arranged = empty(ctx, {elements}, weight.dtype());
  ctx.backend().arrange_conv1d_weight(wc, arranged, ctx.scratch());
  return arranged;
}

namespace {

// A conv_transpose1d's output [B, Cout, Tout] for x [B, Cin, T] (a view is fine) and its bias
// checked against Cout. Throws as conv_transpose1d documents.
struct CheckedTranspose {
  Shape shape;
  Tensor bias;
};

CheckedTranspose check_conv_transpose1d(Context& ctx, const char* op, const Tensor& x,
                                        const Tensor& weight, const Tensor& bias,
                                        const ConvTranspose1dParams& params) {
  require_float_input(ctx, op, "x", x);
  require_float_input(ctx, op, "weight", weight);
  require_same_dtype(op, "weight", weight, x);
  require_rank(op, "x", x, 3);
  require_rank(op, "weight", weight, 3);
  if (params.stride < 1 || params.dilation < 1 || params.padding < 0 || params.groups < 1 ||
      params.output_padding < 0) {
    fail(op, "needs stride >= 1, dilation >= 1, padding >= 0, output_padding >= 0, groups >= 1");
  }
  if (params.output_padding >= params.stride && params.output_padding >= params.dilation) {
    fail(op, "output_padding " + std::to_string(params.output_padding) +
                 " must be smaller than stride " + std::to_string(params.stride) + " or dilation " +
                 std::to_string(params.dilation));
  }
  const int64_t cin = x.size(1);
  const int64_t g = params.groups;
  const int64_t k = weight.size(2);
  if (weight.size(0) != cin) {
    fail(op, "weight " + weight.shape_string() + " expects " + std::to_string(weight.size(0)) +
                 " input channels, x is " + x.shape_string());
  }
  if (cin % g != 0) {
    fail(op, "groups " + std::to_string(g) + " must divide the input channels of x " +
                 x.shape_string());
  }
  if (k < 1) fail(op, "weight " + weight.shape_string() + " has an empty kernel");
  const int64_t cout = weight.size(1) * g;
  const int64_t tout = (x.size(2) - 1) * params.stride - 2 * params.padding +
                       params.dilation * (k - 1) + params.output_padding + 1;
  if (x.size(2) < 1 || tout < 1) {
    fail(op, "x " + x.shape_string() + " with weight " + weight.shape_string() + " and padding " +
                 std::to_string(params.padding) + " gives an empty output");
  }
  CheckedTranspose checked;
  checked.shape = {x.size(0), cout, tout};
  checked.bias = check_bias(ctx, op, bias, cout, x);
  require_backend(ctx, op, OpKind::ConvTranspose1d, x.dtype());
  return checked;
}

// The backend's conv_transpose1d of x [B, Cin, T] (a view is fine), already checked.
Tensor run_conv_transpose1d(Context& ctx, const Tensor& x, const Tensor& weight,
                            const CheckedTranspose& checked, const ConvTranspose1dParams& params) {
  Tensor out = empty(ctx, checked.shape, x.dtype());
  ctx.backend().conv_transpose1d(contiguous(ctx, x), contiguous(ctx, weight), checked.bias, out,
                                 params, ctx.scratch());
  return out;
}

}  // namespace

Tensor conv_transpose1d(Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const ConvTranspose1dParams& params) {
  const CheckedTranspose checked =
      check_conv_transpose1d(ctx, "conv_transpose1d", x, weight, bias, params);
  return run_conv_transpose1d(ctx, x, weight, checked, params);
}

Tensor conv_transpose1d_rows(Context& ctx, const Tensor& x, const Tensor& weight,
                             const Tensor& bias, const ConvTranspose1dParams& params,
                             const Tensor* arranged) {
  const char* op = "conv_transpose1d_rows";
  require_float_input(ctx, op, "x", x);
  require_rank(op, "x", x, 3);
  // Checked as conv_transpose1d checks its x [B, Cin, T]: the rows with time and channels swapped.
  const Tensor channel_major = x.transpose(1, 2);
  const CheckedTranspose checked =
      check_conv_transpose1d(ctx, op, channel_major, weight, bias, params);
  const int64_t elements = ctx.backend().arranged_conv_transpose1d_elements(weight, params);
  check_arrangement(ctx, op, "weight's ", arranged, weight, elements,
                    "ops::arrange_conv_transpose1d_weight");
  if (!ctx.backend().runs_conv_transpose1d_rows(x, weight, params)) {
    return transpose(ctx, run_conv_transpose1d(ctx, channel_major, weight, checked, params), 1, 2);
  }
  Tensor out = empty(ctx, {checked.shape[0], checked.shape[2], checked.shape[1]}, x.dtype());
  ctx.backend().conv_transpose1d_rows(contiguous(ctx, x), contiguous(ctx, weight), checked.bias,
                                      out, params, elements > 0 ? arranged : nullptr,
                                      ctx.scratch());
  return out;
}

Tensor arrange_conv_transpose1d_weight(Context& ctx, const Tensor& weight, const Tensor& bias,
                                       const ConvTranspose1dParams& params) {
  const char* op = "arrange_conv_transpose1d_weight";
  require_rank(op, "weight", weight, 3);
  require_on_device(ctx, op, "weight", weight);
  if (bias.defined()) require_on_device(ctx, op, "bias", bias);
  const int64_t elements = ctx.backend().arranged_conv_transpose1d_elements(weight, params);
  if (elements == 0) return Tensor();
  Tensor arranged = empty(ctx, {elements}, weight.dtype());
  ctx.backend().arrange_conv_transpose1d_weight(contiguous(ctx, weight),
                                                bias.defined() ? contiguous(ctx, bias) : bias,
                                                params, arranged, ctx.scratch());
  return arranged;
}

namespace {

// layer_norm's checks and launch for both ops: x [..., C] (with `residual` of its shape, when
// given, added first by the backend's add_layer_norm) normalised over C.
Tensor normalise_rows(Context& ctx, const char* op, OpKind kind, const Tensor& x,
                      const Tensor* residual, const Tensor& gamma, const Tensor& beta, float eps) {
  require_float_input(ctx, op, "x", x);
  require_float_input(ctx, op, "gamma", gamma);
  require_float_input(ctx, op, "beta", beta);
  require_same_dtype(op, "gamma", gamma, x);
  require_same_dtype(op, "beta", beta, x);
  if (x.dim() < 1) fail(op, "x must have at least one dimension, got " + x.shape_string());
  const int64_t c = x.size(-1);
  if (gamma.dim() != 1 || gamma.size(0) != c || beta.dim() != 1 || beta.size(0) != c) {
    fail(op, "gamma " + gamma.shape_string() + " and beta " + beta.shape_string() +
                 " should both be [" + std::to_string(c) + "] for x " + x.shape_string());
  }
  require_backend(ctx, op, kind, x.dtype());
  const Tensor x2 = contiguous(ctx, x).reshape({-1, c});
  Tensor out = empty(ctx, x2.shape(), x.dtype());
  const Tensor g = contiguous(ctx, gamma);
  const Tensor bt = contiguous(ctx, beta);
  if (residual != nullptr) {
    const Tensor r2 = contiguous(ctx, *residual).reshape({-1, c});
    if (!ctx.planning()) ctx.backend().add_layer_norm(x2, r2, g, bt, eps, out);
  } else if (!ctx.planning()) {
    ctx.backend().layer_norm(x2, g, bt, eps, out);
  }
  return out.reshape(x.shape());
}

}  // namespace

Tensor layer_norm(Context& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                  float eps) {
  return normalise_rows(ctx, "layer_norm", OpKind::LayerNorm, x, nullptr, gamma, beta, eps);
}

Tensor add_layer_norm(Context& ctx, const Tensor& x, const Tensor& residual, const Tensor& gamma,
                      const Tensor& beta, float eps) {
  const char* op = "add_layer_norm";
  require_float_input(ctx, op, "x", x);
  require_float_input(ctx, op, "residual", residual);
  require_same_dtype(op, "residual", residual, x);
  if (residual.shape() != x.shape()) {
    fail(op, "residual " + residual.shape_string() + " must have x's shape " + x.shape_string());
  }
  if (!ctx.backend().supports(OpKind::AddLayerNorm, x.dtype())) {
    return layer_norm(ctx, add(ctx, x, residual), gamma, beta, eps);
  }
  return normalise_rows(ctx, op, OpKind::AddLayerNorm, x, &residual, gamma, beta, eps);
}

Tensor rms_norm(Context& ctx, const Tensor& x, const Tensor& weight, float eps) {
  const char* op = "rms_norm";
  require_float_input(ctx, op, "x", x);
  require_float_input(ctx, op, "weight", weight);
  require_same_dtype(op, "weight", weight, x);
  if (x.dim() < 1) fail(op, "x must have at least one dimension, got " + x.shape_string());
  const int64_t c = x.size(-1);
  if (weight.dim() != 1 || weight.size(0) != c) {
    fail(op, "weight " + weight.shape_string() + " should be [" + std::to_string(c) + "] for x " +
                 x.shape_string());
  }
  require_backend(ctx, op, OpKind::RmsNorm, x.dtype());
  Tensor x2 = contiguous(ctx, x).reshape({-1, c});
  const Tensor w = contiguous(ctx, weight);
  Tensor out = empty(ctx, x2.shape(), x.dtype());
  if (!ctx.planning()) ctx.backend().rms_norm(x2, w, eps, out);
  return out.reshape(x.shape());
}

Tensor embedding(Context& ctx, const Tensor& ids, const Tensor& table) {
  const char* op = "embedding";
  require_defined(op, "ids", ids);
  require_float_input(ctx, op, "table", table);
  require_rank(op, "table", table, 2);
  if (ids.dtype() != DType::I32 && ids.dtype() != DType::I64) {
    fail(op, "ids " + ids.shape_string() + " must be I32 or I64, got " +
                 std::string(dtype_name(ids.dtype())));
  }
  if (ids.dim() < 1) fail(op, "ids must have at least one dimension, got " + ids.shape_string());
  if (!ids.device().is_cpu() && ids.device() != ctx.device()) {
    fail(op, "ids are on " + ids.device().to_string() + ", expected the host or " +
                 ctx.device().to_string());
  }
  require_backend(ctx, op, OpKind::Embedding, table.dtype());
  Tensor flat = ids;
  if (!ids.is_contiguous()) {
    // Host ids of a device backend are made contiguous on the host; ids on the context's device
    // (host ids of a host backend included) by a kernel, which a planning pass does not run.
    flat =
        ids.device() == ctx.device() ? contiguous(ctx, ids) : ids.to_host_contiguous(ids.dtype());
  }
  flat = flat.reshape({-1});
  Shape out_shape = ids.shape();
  out_shape.push_back(table.size(1));
  Tensor out = empty(ctx, {flat.size(0), table.size(1)}, table.dtype());
  ctx.backend().embedding(flat, contiguous(ctx, table), out, ctx.scratch());
  return out.reshape(out_shape);
}

Tensor gather_rows(Context& ctx, const Tensor& table, const Tensor& rows) {
  const char* op = "gather_rows";
  require_defined(op, "rows", rows);
  require_float_input(ctx, op, "table", table);
  require_rank(op, "table", table, 2);
  if (rows.dtype() != DType::I64 || rows.dim() < 1 || !rows.is_contiguous()) {
    fail(op, "rows must be contiguous I64 of at least one dimension, got " +
                 std::string(dtype_name(rows.dtype())) + " " + rows.shape_string());
  }
  if (!rows.device().is_cpu() && rows.device() != ctx.device()) {
    fail(op, "rows are on " + rows.device().to_string() + ", expected the host or " +
                 ctx.device().to_string());
  }
  require_backend(ctx, op, OpKind::GatherRows, table.dtype());
  Shape out_shape = rows.shape();
  out_shape.push_back(table.size(1));
  Tensor out = empty(ctx, {rows.numel(), table.size(1)}, table.dtype());
  ctx.backend().gather_rows(contiguous(ctx, table), rows.reshape({-1}), out, ctx.scratch());
  return out.reshape(out_shape);
}

Tensor attention(Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                 const AttentionParams& params) {
  const char* op = "attention";
  require_float_input(ctx, op, "q", q);
  require_float_input(ctx, op, "k", k);
  require_float_input(ctx, op, "v", v);
  require_same_dtype(op, "k", k, q);
  require_same_dtype(op, "v", v, q);
  require_rank(op, "q", q, 4);
  require_rank(op, "k", k, 4);
  require_rank(op, "v", v, 4);
  const int64_t batch = q.size(0);
  const int64_t tk = k.size(1);
  if (k.shape() != v.shape() || k.size(0) != batch || k.size(2) != q.size(2) ||
      k.size(3) != q.size(3)) {
    fail(op, "q [B, Tq, H, D], k and v [B, Tk, H, D] do not match: q " + q.shape_string() + ", k " +
                 k.shape_string() + ", v " + v.shape_string());
  }
  if (params.key_length_tensor.defined()) {
    if (!params.key_lengths.empty() || params.causal || !params.key_starts.empty() ||
        !params.query_offsets.empty()) {
      fail(op,
           "key_length_tensor goes without key_lengths, causal, key_starts and "
           "query_offsets");
    }
    require_sequence_tensor(ctx, op, "key_length_tensor", params.key_length_tensor, batch);
    if (params.key_length_tensor.device().is_cpu()) {
      // Host lengths as the vector; a planning pass reads no element: any lengths take the
      // same scratch. (Only here are the params copied: the attention of every step is hot.)
      AttentionParams host = params;
      host.key_lengths = ctx.planning() ? std::vector<int64_t>(static_cast<size_t>(batch), tk)
                                        : params.key_length_tensor.to_int_vector();
      host.key_length_tensor = Tensor();
      return attention(ctx, q, k, v, host);
    }
  }
  if (!params.key_lengths.empty()) {
    if (static_cast<int64_t>(params.key_lengths.size()) != batch) {
      fail(op, std::to_string(params.key_lengths.size()) + " key_lengths for batch size " +
                   std::to_string(batch));
    }
    for (int64_t len : params.key_lengths) {
      if (len < 0 || len > tk) {
        fail(op, "key length " + std::to_string(len) + " outside [0, " + std::to_string(tk) +
                     "] for k " + k.shape_string());
      }
    }
  }
  if (!params.key_starts.empty()) {
    if (static_cast<int64_t>(params.key_starts.size()) != batch) {
      fail(op, std::to_string(params.key_starts.size()) + " key_starts for batch size " +
                   std::to_string(batch));
    }
    for (int64_t start : params.key_starts) {
      if (start < 0 || start > tk) {
        fail(op, "key start " + std::to_string(start) + " outside [0, " + std::to_string(tk) +
                     "] for k " + k.shape_string());
      }
    }
  }
  if (!params.query_offsets.empty() && static_cast<int64_t>(params.query_offsets.size()) != batch) {
    fail(op, std::to_string(params.query_offsets.size()) + " query_offsets for batch size " +
                 std::to_string(batch));
  }
  require_backend(ctx, op, OpKind::Attention, q.dtype());
  Tensor out = empty(ctx, q.shape(), q.dtype());
  ctx.backend().attention(contiguous(ctx, q), contiguous(ctx, k), contiguous(ctx, v), out, params,
                          ctx.scratch());
  return out;
}

Tensor rope(Context& ctx, const Tensor& x, const std::vector<int64_t>& start_positions,
            float theta) {
  require_rank("rope", "x", x, 4);
  const int64_t batch = x.size(0);
  if (!start_positions.empty() && static_cast<int64_t>(start_positions.size()) != batch) {
    fail("rope", std::to_string(start_positions.size()) + " start positions for x " +
                     x.shape_string() + " (one per batch item, or none for 0)");
  }
  return rope(ctx, x,
              Tensor::from_vector({batch}, start_positions.empty()
                                               ? std::vector<int64_t>(static_cast<size_t>(batch), 0)
                                               : start_positions),
              theta);
}

Tensor rope(Context& ctx, const Tensor& x, const Tensor& start_positions, float theta) {
  const char* op = "rope";
  require_float_input(ctx, op, "x", x);
  require_rank(op, "x", x, 4);
  const int64_t batch = x.size(0);
  if (x.size(3) % 2 != 0) {
    fail(op, "x [B, T, H, D] " + x.shape_string() +
                 " has an odd head size D; rotate_half pairs "
                 "dimension i with i + D/2");
  }
  if (start_positions.dtype() != DType::I64 || start_positions.shape() != Shape{batch} ||
      !start_positions.is_contiguous() ||
      !(start_positions.device().is_cpu() || start_positions.device() == ctx.device())) {
    fail(op, "start positions must be I64 [B] = [" + std::to_string(batch) +
                 "], contiguous, on the host or the context's device, got " +
                 start_positions.shape_string() + " on " + start_positions.device().to_string());
  }
  require_rope_theta(op, theta);
  require_backend(ctx, op, OpKind::Rope, x.dtype());
  const Tensor xc = contiguous(ctx, x);
  Tensor out = empty(ctx, x.shape(), x.dtype());
  ctx.backend().rope(xc, start_positions, theta, out, ctx.scratch());
  return out;
}

Tensor& write_rows(Context& ctx, Tensor& cache, const Tensor& rows,
                   const std::vector<int64_t>& offsets) {
  const char* op = "write_rows";
  require_float_input(ctx, op, "cache", cache);
  require_float_input(ctx, op, "rows", rows);
  if (rows.dtype() != cache.dtype()) {
    fail(op, "rows have dtype " + std::string(dtype_name(rows.dtype())) + ", the cache " +
                 std::string(dtype_name(cache.dtype())));
  }
  if (cache.dim() < 2 || rows.dim() != cache.dim() || rows.size(0) != cache.size(0) ||
      !std::equal(rows.shape().begin() + 2, rows.shape().end(), cache.shape().begin() + 2)) {
    fail(op, "rows [B, T, ...] " + rows.shape_string() + " do not fit cache [B, Tmax, ...] " +
                 cache.shape_string());
  }
  if (!cache.is_contiguous()) {
    fail(op, "the cache is written in place and must be contiguous, it is " + cache.shape_string() +
                 " with strides " + shape_to_string(cache.strides()));
  }
  if (static_cast<int64_t>(offsets.size()) != cache.size(0)) {
    fail(op, std::to_string(offsets.size()) + " offsets for cache " + cache.shape_string());
  }
  const int64_t t = rows.size(1);
  for (size_t b = 0; b < offsets.size(); ++b) {
    if (offsets[b] < 0 || offsets[b] > cache.size(1) - t) {
      fail(op, "batch " + std::to_string(b) + ": " + std::to_string(t) + " rows at offset " +
                   std::to_string(offsets[b]) + " do not fit the cache's " +
                   std::to_string(cache.size(1)) + " rows");
    }
  }
  require_backend(ctx, op, OpKind::WriteRows, cache.dtype());
  Tensor rc = contiguous(ctx, rows);
  if (rc.storage() == cache.storage()) rc = to_device(ctx, rc, rc.dtype());
  ctx.backend().write_rows(cache, rc, offsets, ctx.scratch());
  return cache;
}

namespace {

// The page table [B, P] and positions [B] of a paged op: I64, contiguous, on the host or the
// context's device; on the host, every entry is checked (a page in [-1, pages), a position >= 0).
void check_page_metadata(Context& ctx, const char* op, const Tensor& page_table,
                         const Tensor& positions, int64_t batch, int64_t pages) {
  for (const auto& [name, t] : {std::pair{"page_table", &page_table}, {"positions", &positions}}) {
    require_defined(op, name, *t);
    if (t->dtype() != DType::I64 || !t->is_contiguous()) {
      fail(op, std::string(name) + " must be contiguous I64, got " +
                   std::string(dtype_name(t->dtype())) + " " + t->shape_string());
    }
    if (!t->device().is_cpu() && t->device() != ctx.device()) {
      fail(op, std::string(name) + " is on " + t->device().to_string() + "; the backend '" +
                   ctx.backend().name() + "' reads it from the host or " +
                   ctx.device().to_string());
    }
  }
  if (page_table.dim() != 2 || page_table.size(0) != batch) {
    fail(op, "page_table must be [B, P] with B = " + std::to_string(batch) + ", got " +
                 page_table.shape_string());
  }
  if (positions.shape() != Shape{batch}) {
    fail(op, "positions must be [B] = [" + std::to_string(batch) + "], got " +
                 positions.shape_string());
  }
  if (page_table.device().is_cpu()) {
    const int64_t* entries = page_table.data<int64_t>();
    for (int64_t i = 0; i < page_table.numel(); ++i) {
      if (entries[i] < -1 || entries[i] >= pages) {
        fail(op, "page_table[" + std::to_string(i / page_table.size(1)) + ", " +
                     std::to_string(i % page_table.size(1)) + "] = " + std::to_string(entries[i]) +
                     " is neither a page in [0, " + std::to_string(pages) + ") nor -1 (none)");
      }
    }
  }
  if (positions.device().is_cpu()) {
    for (int64_t b = 0; b < batch; ++b) {
      if (positions.data<int64_t>()[b] < 0) {
        fail(op, "positions[" + std::to_string(b) +
                     "] = " + std::to_string(positions.data<int64_t>()[b]) + " is negative");
      }
    }
  }
}

// paged_attention's key_starts: contiguous I64 [batch] on the host (each >= 0) or ctx's device.
void check_key_starts(Context& ctx, const char* op, const Tensor& key_starts, int64_t batch) {
  if (key_starts.dtype() != DType::I64 || !key_starts.is_contiguous() ||
      key_starts.shape() != Shape{batch}) {
    fail(op, "key_starts must be contiguous I64 [B] = [" + std::to_string(batch) + "], got " +
                 std::string(dtype_name(key_starts.dtype())) + " " + key_starts.shape_string());
  }
  if (!key_starts.device().is_cpu() && key_starts.device() != ctx.device()) {
    fail(op, "key_starts is on " + key_starts.device().to_string() + "; the backend '" +
                 ctx.backend().name() + "' reads it from the host or " + ctx.device().to_string());
  }
  if (key_starts.device().is_cpu()) {
    for (int64_t b = 0; b < batch; ++b) {
      if (key_starts.data<int64_t>()[b] < 0) {
        fail(op, "key_starts[" + std::to_string(b) +
                     "] = " + std::to_string(key_starts.data<int64_t>()[b]) + " is negative");
      }
    }
  }
}

}  // namespace

Tensor paged_attention(Context& ctx, const Tensor& q, const Tensor& k_pages, const Tensor& v_pages,
                       const Tensor& page_table, const Tensor& positions, float scale,
                       const Tensor& key_starts) {
  const char* op = "paged_attention";
  require_float_input(ctx, op, "q", q);
  require_float_input(ctx, op, "k_pages", k_pages);
  require_float_input(ctx, op, "v_pages", v_pages);
  require_same_dtype(op, "k_pages", k_pages, q);
  require_same_dtype(op, "v_pages", v_pages, q);
  require_rank(op, "q", q, 4);
  check_kv_pages(op, k_pages, v_pages, q, "q", "q [B, T, H, D]", 2, "read");
  check_page_metadata(ctx, op, page_table, positions, q.size(0), k_pages.size(0));
  if (key_starts.defined()) check_key_starts(ctx, op, key_starts, q.size(0));
  require_backend(ctx, op, OpKind::PagedAttention, q.dtype());
  Tensor out = empty(ctx, q.shape(), q.dtype());
  ctx.backend().paged_attention(contiguous(ctx, q), k_pages, v_pages, page_table, positions,
                                key_starts, scale, out, ctx.scratch());
  return out;
}

Tensor& write_pages(Context& ctx, Tensor& pages, const Tensor& rows, const Tensor& page_table,
                    const Tensor& positions) {
  const char* op = "write_pages";
  require_float_input(ctx, op, "pages", pages);
  require_float_input(ctx, op, "rows", rows);
  if (rows.dtype() != pages.dtype()) {
    fail(op, "rows have dtype " + std::string(dtype_name(rows.dtype())) + ", the pages " +
                 std::string(dtype_name(pages.dtype())));
  }
  if (pages.dim() < 2 || rows.dim() != pages.dim() ||
      !std::equal(rows.shape().begin() + 2, rows.shape().end(), pages.shape().begin() + 2)) {
    fail(op, "rows [B, T, ...] " + rows.shape_string() + " do not fit pages [N, S, ...] " +
                 pages.shape_string());
  }
  if (!pages.is_contiguous()) {
    fail(op, "the pages are written in place and must be contiguous, they are " +
                 pages.shape_string() + " with strides " + shape_to_string(pages.strides()));
  }
  check_page_metadata(ctx, op, page_table, positions, rows.size(0), pages.size(0));
  require_backend(ctx, op, OpKind::WritePages, pages.dtype());
  Tensor rc = contiguous(ctx, rows);
  if (rc.storage() == pages.storage()) rc = to_device(ctx, rc, rc.dtype());
  ctx.backend().write_pages(pages, rc, page_table, positions, ctx.scratch());
  return pages;
}

Tensor& zero_beyond_lengths(Context& ctx, Tensor& x, const std::vector<int64_t>& lengths) {
  const char* op = "zero_beyond_lengths";
  require_float_input(ctx, op, "x", x);
  require_rank(op, "x", x, 3);
  require_writable_contiguous(op, x);
  if (static_cast<int64_t>(lengths.size()) != x.size(0)) {
    fail(op, std::to_string(lengths.size()) + " lengths for x " + x.shape_string());
  }
  for (int64_t len : lengths) {
    if (len < 0) fail(op, "negative length " + std::to_string(len));
  }
  require_backend(ctx, op, OpKind::ZeroBeyondLengths, x.dtype());
  ctx.backend().zero_beyond_lengths(x, lengths, ctx.scratch());
  return x;
}

Tensor& zero_beyond_lengths(Context& ctx, Tensor& x, const Tensor& lengths) {
  const char* op = "zero_beyond_lengths";
  require_rank(op, "x", x, 3);
  require_sequence_tensor(ctx, op, "lengths", lengths, x.size(0));
  if (lengths.device().is_cpu()) {
    // A planning pass reads no element: any lengths take the same scratch.
    return zero_beyond_lengths(ctx, x,
                               ctx.planning() ? std::vector<int64_t>(static_cast<size_t>(x.size(0)))
                                              : lengths.to_int_vector());
  }
  require_float_input(ctx, op, "x", x);
  require_writable_contiguous(op, x);
  require_backend(ctx, op, OpKind::ZeroBeyondLengths, x.dtype());
  ctx.backend().zero_beyond_device_lengths(x, lengths, ctx.scratch());
  return x;
}

std::vector<int64_t> length_regulation_rows(const std::vector<std::vector<int64_t>>& durations,
                                            int64_t rows, int64_t frames) {
  std::vector<int64_t> map(durations.size() * static_cast<size_t>(frames), -1);
  for (size_t b = 0; b < durations.size(); ++b) {
    int64_t frame = 0;
    for (size_t row = 0; row < durations[b].size(); ++row) {
      for (int64_t r = 0; r < durations[b][row] && frame < frames; ++r, ++frame) {
        map[b * static_cast<size_t>(frames) + static_cast<size_t>(frame)] =
            static_cast<int64_t>(b) * rows + static_cast<int64_t>(row);
      }
    }
  }
  return map;
}

Tensor length_regulate(Context& ctx, const Tensor& x,
                       const std::vector<std::vector<int64_t>>& durations, int64_t min_frames) {
  const char* op = "length_regulate";
  require_float_input(ctx, op, "x", x);
  require_rank(op, "x", x, 3);
  const int64_t batch = x.size(0);
  const int64_t t = x.size(1);
  if (static_cast<int64_t>(durations.size()) != batch) {
    fail(op, std::to_string(durations.size()) + " duration lists for x " + x.shape_string());
  }
  std::vector<std::vector<int64_t>> padded(durations.size());
  int64_t frames = min_frames < 0 ? 0 : min_frames;
  for (size_t b = 0; b < durations.size(); ++b) {
    if (static_cast<int64_t>(durations[b].size()) > t) {
      fail(op, std::to_string(durations[b].size()) + " durations for batch " + std::to_string(b) +
                   " but x " + x.shape_string() + " has " + std::to_string(t) + " rows");
    }
    int64_t total = 0;
    for (int64_t d : durations[b]) {
      if (d < 0)
        fail(op, "negative duration " + std::to_string(d) + " in batch " + std::to_string(b));
      total += d;
    }
    frames = std::max(frames, total);
    padded[b] = durations[b];
    padded[b].resize(static_cast<size_t>(t), 0);
  }
  require_backend(ctx, op, OpKind::LengthRegulate, x.dtype());
  Tensor out = empty(ctx, {batch, frames, x.size(2)}, x.dtype());
  ctx.backend().length_regulate(contiguous(ctx, x), padded, out, ctx.scratch());
  return out;
}

Tensor bucketize(Context& ctx, const Tensor& x, const Tensor& boundaries) {
  const char* op = "bucketize";
  require_float_input(ctx, op, "x", x);
  require_float_input(ctx, op, "boundaries", boundaries);
  require_rank(op, "boundaries", boundaries, 1);
  if (x.dtype() != DType::F32 || boundaries.dtype() != DType::F32) {
    fail(op, "x and boundaries must be F32");
  }
  if (boundaries.device().is_cpu() && !ctx.planning()) {
    const std::vector<float> b = boundaries.to_float_vector();
    for (size_t i = 1; i < b.size(); ++i) {
      if (!(b[i - 1] <= b[i])) {
        fail(op, "boundaries " + boundaries.shape_string() + " are not ascending at index " +
                     std::to_string(i));
      }
    }
  }
  require_backend(ctx, op, OpKind::Bucketize, x.dtype());
  Tensor out = empty(ctx, x.shape(), DType::I64);
  const Tensor xc = contiguous(ctx, x);
  const Tensor bc = contiguous(ctx, boundaries);
  if (!ctx.planning()) ctx.backend().bucketize(xc, bc, out);
  return out;
}

namespace {

// torch.istft's NOLA check: the overlap-added Σ window² (summed in F32 as torch does) over the
// kept samples [n_fft/2, n_fft/2 + length) must be at least 1e-11.
void check_istft_envelope(const Tensor& window, int64_t hop, int64_t frames, int64_t length) {
  const std::vector<float> w = window.to_float_vector();
  const auto n_fft = static_cast<int64_t>(w.size());
  const int64_t start = n_fft / 2;
  for (int64_t n = start; n < start + length; ++n) {
    float envelope = 0.0f;
    for (int64_t f = std::max<int64_t>(0, (n - n_fft) / hop); f < frames && f * hop <= n; ++f) {
      const int64_t m = n - f * hop;
      if (m < n_fft) envelope += w[static_cast<size_t>(m)] * w[static_cast<size_t>(m)];
    }
    if (std::abs(envelope) < 1e-11f) {
      fail("istft",
           "the window's overlap-add envelope (sum of window^2 over the frames reaching "
           "an output sample) is " +
               std::to_string(envelope) + " at output sample " + std::to_string(n - start) +
               ", below torch.istft's 1e-11 (window overlap "
               "add min); use a hop at most n_fft and a window that is nonzero where only "
               "one frame reaches");
    }
  }
}

}  // namespace

Tensor istft(Context& ctx, const Tensor& real, const Tensor& imag, const Tensor& window,
             int64_t hop) {
  const char* op = "istft";
  require_float_input(ctx, op, "real", real);
  require_float_input(ctx, op, "imag", imag);
  require_rank(op, "real", real, 3);
  require_rank(op, "window", window, 1);
  if (real.dtype() != DType::F32 || imag.dtype() != DType::F32 || window.dtype() != DType::F32) {
    fail(op, "real, imag and window must be F32, got " + std::string(dtype_name(real.dtype())) +
                 ", " + std::string(dtype_name(imag.dtype())) + " and " +
                 std::string(dtype_name(window.dtype())));
  }
  if (imag.shape() != real.shape()) {
    fail(op, "imag " + imag.shape_string() + " does not match real " + real.shape_string());
  }
  if (!window.device().is_cpu()) {
    fail(op, "the window must be a host tensor (its envelope is checked on the host), it is on " +
                 window.device().to_string());
  }
  const int64_t n_fft = window.size(0);
  const int64_t bins = n_fft / 2 + 1;
  const int64_t frames = real.size(2);
  if (n_fft < 1 || real.size(1) != bins) {
    fail(op, "real [B, n_fft/2 + 1, frames] " + real.shape_string() + " does not fit a window of " +
                 std::to_string(n_fft) + " samples (n_fft), which needs " + std::to_string(bins) +
                 " bins");
  }
  if (hop < 1) fail(op, "hop must be at least 1, got " + std::to_string(hop));
  const int64_t length = n_fft + hop * (frames - 1) - 2 * (n_fft / 2);
  if (frames < 1 || length < 1) {
    fail(op, std::to_string(frames) + " frames of n_fft " + std::to_string(n_fft) + " with hop " +
                 std::to_string(hop) + " leave no sample after trimming n_fft/2 from each end");
  }
  require_backend(ctx, op, OpKind::Istft, DType::F32);
  Tensor w = window;
  if (!ctx.planning()) {
    if (!w.is_contiguous()) w = w.to_host_contiguous(DType::F32);
    check_istft_envelope(w, hop, frames, length);
  }
  const Tensor rc = contiguous(ctx, real);
  const Tensor ic = contiguous(ctx, imag);
  Tensor out = empty(ctx, {real.size(0), length}, DType::F32);
  ctx.backend().istft(rc, ic, w, hop, out, ctx.scratch());
  return out;
}

Tensor sample_tokens(Context& ctx, const Tensor& logits, const Tensor& history,
                     const std::vector<TokenDraw>& draws) {
  const char* op = "sample_tokens";
  require_float_input(ctx, op, "logits", logits);
  require_rank(op, "logits", logits, 2);
  if (logits.dtype() != DType::F32) {
    fail(op, "logits must be F32, got " + std::string(dtype_name(logits.dtype())));
  }
  const int64_t rows = logits.size(0);
  constexpr int64_t kMaxVocabulary = int64_t{1} << 24;
  if (logits.size(1) < 1 || logits.size(1) >= kMaxVocabulary) {
    fail(op, "logits " + logits.shape_string() + " need between 1 and 2^24 − 1 tokens per row");
  }
  require_defined(op, "history", history);
  if (history.dtype() != DType::I64 || !history.is_contiguous() || history.dim() != 2 ||
      history.size(0) != rows) {
    fail(op, "history must be contiguous I64 [R, W] with R = " + std::to_string(rows) + ", got " +
                 std::string(dtype_name(history.dtype())) + " " + history.shape_string());
  }
  if (!history.device().is_cpu() && history.device() != ctx.device()) {
    fail(op, "history is on " + history.device().to_string() + "; the backend '" +
                 ctx.backend().name() + "' reads it from the host or " + ctx.device().to_string());
  }
  if (static_cast<int64_t>(draws.size()) != rows) {
    fail(op, std::to_string(draws.size()) + " draws for logits " + logits.shape_string() +
                 "; expected one per row");
  }
  for (size_t r = 0; r < draws.size(); ++r) {
    const TokenDraw& d = draws[r];
    const auto positive = [](float v) { return std::isfinite(v) && v > 0.0f; };
    const char* field = !positive(d.temperature)              ? "temperature"
                        : !positive(d.repetition_penalty)     ? "repetition_penalty"
                        : !(d.top_p >= 0.0 && d.top_p <= 1.0) ? "top_p"
                        : d.top_k < 0                         ? "top_k"
                        : d.min_keep < 0                      ? "min_keep"
                                                              : nullptr;
    if (field != nullptr) {
      fail(op, "draws[" + std::to_string(r) + "]." + field +
                   " is out of range (temperature and repetition_penalty > 0, top_p in [0, 1] "
                   "with 0 for none, top_k and min_keep >= 0)");
    }
  }
  require_backend(ctx, op, OpKind::SampleTokens, DType::F32);
  Tensor tokens = empty(ctx, {rows}, DType::I64);
  if (rows == 0) return tokens;
  ctx.backend().sample_tokens(contiguous(ctx, logits), history, draws, tokens, ctx.scratch());
  return tokens;
}

Tensor lstm(Context& ctx, const Tensor& x_gates, const Tensor& w_hh, Tensor& h, Tensor& c,
            const std::vector<int64_t>& lengths, bool reverse) {
  const char* op = "lstm";
  require_float_input(ctx, op, "x_gates", x_gates);
  require_float_input(ctx, op, "w_hh", w_hh);
  require_same_dtype(op, "w_hh", w_hh, x_gates);
  require_rank(op, "x_gates", x_gates, 3);
  require_rank(op, "w_hh", w_hh, 2);
  const int64_t batch = x_gates.size(0);
  const int64_t steps = x_gates.size(1);
  const int64_t hidden = w_hh.size(1);
  if (w_hh.size(0) != 4 * hidden || x_gates.size(2) != 4 * hidden) {
    fail(op, "w_hh [4H, H] and x_gates [B, T, 4H] do not match: w_hh " + w_hh.shape_string() +
                 ", x_gates " + x_gates.shape_string());
  }
  for (const auto& [name, state] : {std::pair{"h", &h}, std::pair{"c", &c}}) {
    require_defined(op, name, *state);
    if (state->dtype() != DType::F32 || !state->is_contiguous() ||
        state->shape() != Shape{batch, hidden} || state->device() != ctx.device()) {
      fail(op, std::string(name) + " must be contiguous F32 [" + std::to_string(batch) + ", " +
                   std::to_string(hidden) + "] on " + ctx.device().to_string() + ", got " +
                   std::string(dtype_name(state->dtype())) + " " + state->shape_string() + " on " +
                   state->device().to_string());
    }
  }
  if (!lengths.empty()) {
    if (static_cast<int64_t>(lengths.size()) != batch) {
      fail(op, std::to_string(lengths.size()) + " lengths for batch size " + std::to_string(batch));
    }
    for (int64_t length : lengths) {
      if (length < 0 || length > steps) {
        fail(op, "length " + std::to_string(length) + " outside [0, " + std::to_string(steps) +
                     "] for x_gates " + x_gates.shape_string());
      }
    }
  }
  require_backend(ctx, op, OpKind::Lstm, x_gates.dtype());
  Tensor out = empty(ctx, {batch, steps, hidden}, x_gates.dtype());
  if (out.numel() == 0) return out;
  ctx.backend().lstm(contiguous(ctx, x_gates), contiguous(ctx, w_hh), h, c, lengths, reverse, out,
                     ctx.scratch());
  return out;
}

ResidualNorm add_rms_norm(Context& ctx, const Tensor& x, const Tensor& delta, const Tensor& weight,
                          float eps, DType normed_dtype) {
  const char* op = "add_rms_norm";
  require_float_input(ctx, op, "x", x);
  require_float_input(ctx, op, "delta", delta);
  require_float_input(ctx, op, "weight", weight);
  require_same_dtype(op, "weight", weight, x);
  if (!is_floating(normed_dtype)) {
    fail(op, "the normed output's dtype must be floating, got " +
                 std::string(dtype_name(normed_dtype)));
  }
  if (x.dim() < 1 || delta.shape() != x.shape()) {
    fail(op, "delta " + delta.shape_string() + " must have x's shape " + x.shape_string());
  }
  const int64_t c = x.size(-1);
  if (weight.dim() != 1 || weight.size(0) != c) {
    fail(op, "weight " + weight.shape_string() + " should be [" + std::to_string(c) + "] for x " +
                 x.shape_string());
  }
  for (const DType dtype : {x.dtype(), delta.dtype(), normed_dtype}) {
    require_backend(ctx, op, OpKind::AddRmsNorm, dtype);
  }
  const Tensor x2 = contiguous(ctx, x).reshape({-1, c});
  const Tensor d2 = contiguous(ctx, delta).reshape({-1, c});
  const Tensor w = contiguous(ctx, weight);
  Tensor sum = empty(ctx, x2.shape(), x.dtype());
  Tensor normed = empty(ctx, x2.shape(), normed_dtype);
  if (!ctx.planning()) ctx.backend().add_rms_norm(x2, d2, w, eps, sum, normed);
  return {sum.reshape(x.shape()), normed.reshape(x.shape())};
}

Tensor swiglu(Context& ctx, const Tensor& gate_up) {
  const char* op = "swiglu";
  require_float_input(ctx, op, "gate_up", gate_up);
  if (gate_up.dim() < 1 || gate_up.size(-1) % 2 != 0) {
    fail(op, "gate_up [..., 2·I] must have an even last dimension, got " + gate_up.shape_string());
  }
  require_backend(ctx, op, OpKind::Swiglu, gate_up.dtype());
  const int64_t width = gate_up.size(-1);
  const Tensor in = contiguous(ctx, gate_up).reshape({-1, width});
  Tensor out = empty(ctx, {in.size(0), width / 2}, gate_up.dtype());
  if (!ctx.planning() && out.numel() > 0) ctx.backend().swiglu(in, out);
  Shape shape = gate_up.shape();
  shape.back() = width / 2;
  return out.reshape(shape);
}

Tensor qkv_to_pages(Context& ctx, const Tensor& qkv, Tensor& k_pages, Tensor& v_pages,
                    const Tensor& page_table, const Tensor& positions, float theta) {
  const char* op = "qkv_to_pages";
  require_float_input(ctx, op, "qkv", qkv);
  require_float_input(ctx, op, "k_pages", k_pages);
  require_float_input(ctx, op, "v_pages", v_pages);
  require_same_dtype(op, "k_pages", k_pages, qkv);
  require_same_dtype(op, "v_pages", v_pages, qkv);
  require_rank(op, "qkv", qkv, 5);
  if (qkv.size(2) != 3 || qkv.size(4) % 2 != 0) {
    fail(op, "qkv must be [B, T, 3, H, D] with an even head size D, got " + qkv.shape_string());
  }
  check_kv_pages(op, k_pages, v_pages, qkv, "qkv", "qkv [B, T, 3, H, D]", 3, "written");
  require_rope_theta(op, theta);
  check_page_metadata(ctx, op, page_table, positions, qkv.size(0), k_pages.size(0));
  require_backend(ctx, op, OpKind::QkvToPages, qkv.dtype());
  const Tensor in = contiguous(ctx, qkv);
  Tensor q = empty(ctx, {qkv.size(0), qkv.size(1), qkv.size(3), qkv.size(4)}, qkv.dtype());
  ctx.backend().qkv_to_pages(in, k_pages, v_pages, page_table, positions, theta, q, ctx.scratch());
  return q;
}

Tensor transpose(Context& ctx, const Tensor& x, int64_t d0, int64_t d1) {
  require_defined("transpose", "x", x);
  return contiguous(ctx, x.transpose(d0, d1));
}

}  // namespace voxd::ops
