#include "core/weight_loading.h"

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

}  // namespace

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

}  // namespace voxd
