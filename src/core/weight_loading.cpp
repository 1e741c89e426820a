#include "core/weight_loading.h"

#include <cmath>

#include "core/error.h"

namespace voxd {

PrecisionPolicy PrecisionPolicy::for_weights(DType dtype) {
  if (!is_floating(dtype)) {
    throw Error("models: weights cannot be loaded as " + std::string(dtype_name(dtype)) +
                "; use F32, F16 or BF16");
  }
  return {dtype, dtype == DType::BF16 ? DType::F32 : dtype};
}

Tensor PrecisionPolicy::to_compute(Context& ctx, const Tensor& x) const {
  return x.dtype() == compute ? x : ops::to_device(ctx, x, compute);
}

Tensor PrecisionPolicy::to_stream(Context& ctx, const Tensor& x) const {
  return x.dtype() == stream ? x : ops::to_device(ctx, x, stream);
}

namespace {

// The tensor `name` from `source` as stored (a view of the file's mapping), checked.
Tensor checked_parameter(const WeightSource& source, const std::string& name,
                         const Shape& expected) {
  if (!source.contains(name)) {
    throw Error(source.describe() + ": missing tensor '" + name + "' (expected shape " +
                shape_to_string(expected) + ")");
  }
  Tensor t = source.get(name);
  if (t.shape() != expected) {
    throw Error(source.describe() + ": tensor '" + name + "' has shape " + t.shape_string() +
                ", the config expects " + shape_to_string(expected));
  }
  if (!is_floating(t.dtype())) {
    throw Error(source.describe() + ": tensor '" + name + "' has dtype " +
                std::string(dtype_name(t.dtype())) + ", expected a floating type");
  }
  return t;
}

std::string quoted(const std::string& name) {
  return "'" + name + "'";
}

// load_host_parameter's F32 tensor, contiguous so its elements can be read through a pointer.
Tensor load_host_contiguous(const WeightSource& source, const std::string& name,
                            const Shape& shape) {
  Tensor t = load_host_parameter(source, name, shape);
  return t.is_contiguous() ? t : t.to_host_contiguous(DType::F32);
}

}  // namespace

Shape parameter_shape(const WeightSource& source, const std::string& name, int64_t rank,
                      const std::string& expected) {
  const Tensor t = source.get(name);
  if (t.dim() != rank) {
    throw Error(source.describe() + ": tensor '" + name + "' has shape " + t.shape_string() +
                ", expected " + expected);
  }
  return t.shape();
}

Tensor load_host_parameter(const WeightSource& source, const std::string& name,
                           const Shape& expected) {
  Tensor t = checked_parameter(source, name, expected);
  return t.dtype() == DType::F32 ? t : t.to_host_contiguous(DType::F32);
}

Tensor load_parameter(Context& ctx, const WeightSource& source, const std::string& name,
                      const Shape& expected, DType dtype) {
  // Straight from the file's mapping to the device: the backend converts the stored dtype
  // (on the device, for CUDA) instead of a converted copy being made on the host first.
  return ops::to_device(ctx, checked_parameter(source, name, expected), dtype);
}

Tensor load_weight_norm_parameter(const WeightSource& source, const std::string& prefix,
                                  const Shape& shape) {
  const std::string g_name = prefix + ".weight_g";
  const std::string v_name = prefix + ".weight_v";
  if (!source.contains(g_name) && !source.contains(v_name)) {
    if (!source.contains(prefix + ".weight")) {
      throw Error(source.describe() + ": missing tensors " + quoted(g_name) + " and " +
                  quoted(v_name) + " (or a folded " + quoted(prefix + ".weight") +
                  ", expected shape " + shape_to_string(shape) + ")");
    }
    return load_host_parameter(source, prefix + ".weight", shape);
  }
  const Tensor g = load_host_contiguous(source, g_name, {shape[0], 1, 1});
  const Tensor v = load_host_contiguous(source, v_name, shape);
  Tensor w = Tensor::empty(shape, DType::F32);
  const int64_t rows = shape[0];
  const int64_t row_size = v.numel() / rows;
  const float* gp = g.data<float>();
  const float* vp = v.data<float>();
  float* wp = w.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const float* vr = vp + r * row_size;
    double sum_sq = 0.0;
    for (int64_t i = 0; i < row_size; ++i) sum_sq += static_cast<double>(vr[i]) * vr[i];
    const double factor = static_cast<double>(gp[r]) / std::sqrt(sum_sq);
    for (int64_t i = 0; i < row_size; ++i) {
      wp[r * row_size + i] = static_cast<float>(vr[i] * factor);
    }
  }
  return w;
}

}  // namespace voxd
