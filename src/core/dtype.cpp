#include "core/dtype.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "core/error.h"

namespace voxd {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32:
    case DType::I32:
      return 4;
    case DType::F16:
    case DType::BF16:
      return 2;
    case DType::I64:
      return 8;
  }
  return 0;
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return "F32";
    case DType::F16:
      return "F16";
    case DType::BF16:
      return "BF16";
    case DType::I32:
      return "I32";
    case DType::I64:
      return "I64";
  }
  return "?";
}

bool parse_dtype(std::string_view name, DType* out) {
  for (DType d : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64}) {
    if (dtype_name(d) == name) {
      *out = d;
      return true;
    }
  }
  return false;
}

bool is_floating(DType dtype) {
  return dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16;
}

uint16_t float_to_half(float value) {
  uint32_t f;
  std::memcpy(&f, &value, 4);
  const uint32_t sign = (f >> 16) & 0x8000u;
  const uint32_t abs = f & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {                                               // subnormal or zero
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // 14..24
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = ((abs - 0x38000000u) >> 13);
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

// Every half is a float exactly: shift the exponent and mantissa into place and rebias the
// exponent (twice for infinities and NaNs, which keep their payload); subnormals are their
// integer times 2^-24. Both are computed and one chosen by masks, with no branch, so that a loop
// over halves vectorises.
float half_to_float(uint16_t bits) {
  const uint32_t sign = (bits & 0x8000u) << 16;
  const uint32_t magnitude = bits & 0x7fffu;
  const uint32_t special = 0u - static_cast<uint32_t>(magnitude >= 0x7c00u);
  const uint32_t normal = 0u - static_cast<uint32_t>(magnitude >= 0x0400u);
  const uint32_t shifted = (magnitude << 13) + 0x38000000u + (special & 0x38000000u);
  const auto subnormal =
      std::bit_cast<uint32_t>(static_cast<float>(static_cast<int32_t>(magnitude)) * 0x1p-24f);
  return std::bit_cast<float>((shifted & normal) | (subnormal & ~normal) | sign);
}

uint16_t float_to_bfloat16(float value) {
  uint32_t f;
  std::memcpy(&f, &value, 4);
  if ((f & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((f >> 16) | 0x40u);  // nan
  const uint32_t rounding = 0x7fffu + ((f >> 16) & 1u);
  return static_cast<uint16_t>((f + rounding) >> 16);
}

float bfloat16_to_float(uint16_t bits) {
  const uint32_t f = static_cast<uint32_t>(bits) << 16;
  float out;
  std::memcpy(&out, &f, 4);
  return out;
}

namespace {

double load_element(const void* src, DType dtype, size_t i) {
  switch (dtype) {
    case DType::F32:
      return static_cast<const float*>(src)[i];
    case DType::F16:
      return half_to_float(static_cast<const uint16_t*>(src)[i]);
    case DType::BF16:
      return bfloat16_to_float(static_cast<const uint16_t*>(src)[i]);
    case DType::I32:
      return static_cast<const int32_t*>(src)[i];
    case DType::I64:
      return static_cast<double>(static_cast<const int64_t*>(src)[i]);
  }
  return 0;
}

// Float to integer conversion that is defined for every input: NaN becomes 0 and values outside
// the target's range saturate.
template <typename Int>
Int saturating_cast(double value) {
  if (std::isnan(value)) return 0;
  if (value <= static_cast<double>(std::numeric_limits<Int>::min())) {
    return std::numeric_limits<Int>::min();
  }
  if (value >= static_cast<double>(std::numeric_limits<Int>::max())) {
    return std::numeric_limits<Int>::max();
  }
  return static_cast<Int>(value);
}

void store_element(void* dst, DType dtype, size_t i, double value) {
  switch (dtype) {
    case DType::F32:
      static_cast<float*>(dst)[i] = static_cast<float>(value);
      break;
    case DType::F16:
      static_cast<uint16_t*>(dst)[i] = float_to_half(static_cast<float>(value));
      break;
    case DType::BF16:
      static_cast<uint16_t*>(dst)[i] = float_to_bfloat16(static_cast<float>(value));
      break;
    case DType::I32:
      static_cast<int32_t*>(dst)[i] = saturating_cast<int32_t>(value);
      break;
    case DType::I64:
      static_cast<int64_t*>(dst)[i] = saturating_cast<int64_t>(value);
      break;
  }
}

// dst[i] = convert(src[i]) for `count` elements of In into Out.
template <typename In, typename Out, typename Convert>
void map_elements(const void* src, void* dst, size_t count, Convert convert) {
  const auto* in = static_cast<const In*>(src);
  auto* out = static_cast<Out*>(dst);
  for (size_t i = 0; i < count; ++i) out[i] = convert(in[i]);
}

}  // namespace

void convert_elements(const void* src, DType from, void* dst, DType to, size_t count) {
  if (from == to) {
    std::memcpy(dst, src, count * dtype_size(from));
    return;
  }
  if (from == DType::I64 && to == DType::I32) {
    for (size_t i = 0; i < count; ++i) {
      static_cast<int32_t*>(dst)[i] = static_cast<int32_t>(static_cast<const int64_t*>(src)[i]);
    }
    return;
  }
  // The conversions on the host's hot paths (a step's F16/BF16 output to F32, F32 to the weights'
  // dtype) as plain loops over the scalar functions, which GCC vectorises.
  if (from == DType::F16 && to == DType::F32)
    return map_elements<uint16_t, float>(src, dst, count, half_to_float);
  if (from == DType::BF16 && to == DType::F32) {
    return map_elements<uint16_t, float>(src, dst, count, bfloat16_to_float);
  }
  if (from == DType::F32 && to == DType::F16) {
    return map_elements<float, uint16_t>(src, dst, count, float_to_half);
  }
  if (from == DType::F32 && to == DType::BF16) {
    return map_elements<float, uint16_t>(src, dst, count, float_to_bfloat16);
  }
  if (from == DType::I32 && to == DType::I64) {
    for (size_t i = 0; i < count; ++i) {
      static_cast<int64_t*>(dst)[i] = static_cast<const int32_t*>(src)[i];
    }
    return;
  }
  for (size_t i = 0; i < count; ++i) store_element(dst, to, i, load_element(src, from, i));
}

}  // namespace voxd
