// Tensor views and contiguity, strided host copies, dtype conversions and host allocator stats.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/allocator.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

namespace voxd {
namespace {

std::vector<float> iota(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  return v;
}

float bits_to_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint32_t float_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

TEST(TensorViews, ReshapeSharesStorageAndInfersOneSize) {
  const Tensor t = Tensor::from_vector({2, 3, 4}, iota(24));
  const Tensor r = t.reshape({6, -1});
  EXPECT_EQ(r.shape(), (Shape{6, 4}));
  EXPECT_EQ(r.raw_data(), t.raw_data());
  EXPECT_EQ(r.to_float_vector(), t.to_float_vector());
  EXPECT_THROW(t.reshape({5, -1}), Error);
  EXPECT_THROW(t.reshape({-1, -1}), Error);
  EXPECT_THROW(t.transpose(0, 2).reshape({24}), Error);
}

TEST(TensorViews, TransposeAndPermute) {
  const Tensor t = Tensor::from_vector({2, 3}, iota(6));
  const Tensor tt = t.transpose(0, 1);
  EXPECT_EQ(tt.shape(), (Shape{3, 2}));
  EXPECT_EQ(tt.strides(), (Shape{1, 3}));
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_EQ(tt.to_float_vector(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  const Tensor c = Tensor::from_vector({2, 3, 4}, iota(24));
  const Tensor p = c.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  // p[i, j, k] = c[j, k, i] = 12 j + 4 k + i
  const std::vector<float> v = p.to_float_vector();
  EXPECT_EQ(v[1 * 6 + 1 * 3 + 2], 12 + 8 + 1);
  EXPECT_EQ(c.transpose(-1, 0).shape(), (Shape{4, 3, 2}));
  EXPECT_THROW(c.transpose(0, 3), Error);
}

TEST(TensorViews, NarrowSelectSqueezeUnsqueeze) {
  const Tensor t = Tensor::from_vector({3, 4}, iota(12));
  const Tensor n = t.narrow(1, 1, 2);
  EXPECT_EQ(n.shape(), (Shape{3, 2}));
  EXPECT_FALSE(n.is_contiguous());
  EXPECT_EQ(n.to_float_vector(), (std::vector<float>{1, 2, 5, 6, 9, 10}));
  const Tensor rows = t.narrow(0, 1, 2);
  EXPECT_TRUE(rows.is_contiguous());
  EXPECT_EQ(rows.to_float_vector(), (std::vector<float>{4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_THROW(t.narrow(0, 2, 2), Error);
  const Tensor s = t.select(1, 3);
  EXPECT_EQ(s.shape(), (Shape{3}));
  EXPECT_EQ(s.to_float_vector(), (std::vector<float>{3, 7, 11}));
  EXPECT_EQ(t.select(0, 2).to_float_vector(), (std::vector<float>{8, 9, 10, 11}));
  const Tensor u = t.unsqueeze(0);
  EXPECT_EQ(u.shape(), (Shape{1, 3, 4}));
  EXPECT_TRUE(u.is_contiguous());
  EXPECT_EQ(t.unsqueeze(-1).shape(), (Shape{3, 4, 1}));
  EXPECT_EQ(u.squeeze(0).shape(), (Shape{3, 4}));
  EXPECT_THROW(t.squeeze(0), Error);
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_THROW(t.size(2), Error);
}

TEST(TensorViews, ContiguityIgnoresSizeOneDimensions) {
  const Tensor t = Tensor::from_vector({4, 1, 3}, iota(12));
  EXPECT_TRUE(t.transpose(0, 1).transpose(0, 1).is_contiguous());
  EXPECT_TRUE(t.narrow(0, 1, 1).transpose(0, 1).is_contiguous());
  EXPECT_FALSE(t.transpose(0, 2).is_contiguous());
}

TEST(TensorCopies, ToHostContiguousFollowsStrides) {
  const Tensor t = Tensor::from_vector({2, 3, 4}, iota(24));
  const Tensor view = t.permute({2, 0, 1}).narrow(0, 1, 2);  // [2, 2, 3]
  const Tensor c = view.to_host_contiguous(DType::F32);
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_NE(c.raw_data(), t.raw_data());
  EXPECT_EQ(c.to_float_vector(), (std::vector<float>{1, 5, 9, 13, 17, 21, 2, 6, 10, 14, 18, 22}));
  const Tensor i64 = view.to_host_contiguous(DType::I64);
  EXPECT_EQ(i64.dtype(), DType::I64);
  EXPECT_EQ(i64.to_int_vector()[5], 21);
  const Tensor half = view.to_host_contiguous(DType::F16);
  EXPECT_EQ(half.to_float_vector(), c.to_float_vector());
}

TEST(DTypes, NamesAndSizes) {
  DType d;
  EXPECT_TRUE(parse_dtype("BF16", &d));
  EXPECT_EQ(d, DType::BF16);
  EXPECT_FALSE(parse_dtype("F64", &d));
  EXPECT_EQ(dtype_size(DType::I64), 8u);
  EXPECT_EQ(dtype_size(DType::F16), 2u);
  EXPECT_EQ(dtype_name(DType::I32), "I32");
  EXPECT_TRUE(is_floating(DType::BF16));
  EXPECT_FALSE(is_floating(DType::I32));
}

TEST(DTypes, HalfRoundTripsAndRoundsToNearestEven) {
  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 0.333251953125f, 6.103515625e-05f}) {
    EXPECT_EQ(half_to_float(float_to_half(v)), v) << v;
  }
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties go to the even mantissa (1).
  EXPECT_EQ(float_to_half(1.0f + 0x1p-11f), 0x3c00);
  // 1 + 3·2^-11 is halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even).
  EXPECT_EQ(float_to_half(1.0f + 3 * 0x1p-11f), 0x3c02);
  EXPECT_EQ(float_to_half(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
  // Every half value survives half -> float -> half.
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float f = half_to_float(static_cast<uint16_t>(bits));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_half(f), bits) << bits;
  }
}

TEST(DTypes, HalfSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(float_to_half(inf), 0x7c00);
  EXPECT_EQ(float_to_half(-inf), 0xfc00);
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(std::nanf("")))));
  EXPECT_EQ(half_to_float(0x7c00), inf);
  // Overflow: above 65520 (halfway to 65536) rounds to inf, below stays at the max.
  EXPECT_EQ(float_to_half(65519.0f), 0x7bff);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);
  EXPECT_EQ(float_to_half(1e10f), 0x7c00);
  // Subnormals: smallest is 2^-24; 2^-25 ties to zero, just above it rounds up.
  EXPECT_EQ(half_to_float(0x0001), 0x1p-24f);
  EXPECT_EQ(float_to_half(0x1p-24f), 0x0001);
  EXPECT_EQ(float_to_half(0x1p-25f), 0x0000);
  EXPECT_EQ(float_to_half(0x1.01p-25f), 0x0001);
  EXPECT_EQ(float_to_half(3 * 0x1p-25f), 0x0002);  // 1.5 · 2^-24 ties to even 2
  EXPECT_EQ(half_to_float(0x03ff), 1023 * 0x1p-24f);
  EXPECT_EQ(float_to_half(-1e-10f), 0x8000);
}

TEST(DTypes, BFloat16) {
  EXPECT_EQ(float_to_bfloat16(1.0f), 0x3f80);
  EXPECT_EQ(bfloat16_to_float(0x3f80), 1.0f);
  // Ties to even on the 16 dropped bits.
  EXPECT_EQ(float_to_bfloat16(bits_to_float(0x3f808000u)), 0x3f80);
  EXPECT_EQ(float_to_bfloat16(bits_to_float(0x3f818000u)), 0x3f82);
  EXPECT_EQ(float_to_bfloat16(bits_to_float(0x3f808001u)), 0x3f81);
  EXPECT_EQ(float_to_bfloat16(std::numeric_limits<float>::max()), 0x7f80);  // rounds to inf
  EXPECT_EQ(float_to_bfloat16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_TRUE(std::isnan(bfloat16_to_float(float_to_bfloat16(std::nanf("")))));
  const float sub = std::numeric_limits<float>::denorm_min() * 65536.0f;
  EXPECT_EQ(bfloat16_to_float(float_to_bfloat16(sub)), sub);
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float f = bfloat16_to_float(static_cast<uint16_t>(bits));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_bfloat16(f), bits) << bits;
  }
}

// Every half, through half_to_float and through convert_elements' F16 -> F32 loop, is the value
// its fields spell (sign · mantissa · 2^exponent, written out here with ldexp), to the bit; NaNs
// keep their sign and payload. BF16 -> F32 is the bits shifted; F32 -> F16 / BF16 through
// convert_elements round as the scalar functions do.
TEST(DTypes, EveryHalfConvertsExactly) {
  std::vector<uint16_t> halves(0x10000);
  for (uint32_t bits = 0; bits < 0x10000; ++bits) halves[bits] = static_cast<uint16_t>(bits);
  std::vector<float> converted(halves.size());
  convert_elements(halves.data(), DType::F16, converted.data(), DType::F32, halves.size());
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const int exponent = static_cast<int>((bits >> 10) & 0x1fu);
    const int mantissa = static_cast<int>(bits & 0x3ffu);
    const float sign = (bits & 0x8000u) != 0 ? -1.0f : 1.0f;
    const float scalar = half_to_float(static_cast<uint16_t>(bits));
    ASSERT_EQ(float_bits(converted[bits]), float_bits(scalar)) << bits;
    if (exponent == 31 && mantissa != 0) {
      ASSERT_TRUE(std::isnan(scalar)) << bits;
      ASSERT_EQ(float_bits(scalar),
                ((bits & 0x8000u) << 16) | 0x7f800000u | (static_cast<uint32_t>(mantissa) << 13))
          << bits;
      continue;
    }
    const float expected =
        exponent == 31
            ? sign * std::numeric_limits<float>::infinity()
            : sign * std::ldexp(static_cast<float>(exponent == 0 ? mantissa : 1024 + mantissa),
                                (exponent == 0 ? 1 : exponent) - 25);
    ASSERT_EQ(float_bits(scalar), float_bits(expected)) << bits;
  }
  std::vector<float> widened(halves.size());
  convert_elements(halves.data(), DType::BF16, widened.data(), DType::F32, halves.size());
  for (uint32_t bits = 0; bits < 0x10000; ++bits) ASSERT_EQ(float_bits(widened[bits]), bits << 16);
  // F32 -> F16 / BF16 over values between every representable pair (ties and the rest).
  std::vector<float> floats;
  for (uint32_t bits = 0; bits < (1u << 31); bits += 0x1fffu) floats.push_back(bits_to_float(bits));
  std::vector<uint16_t> narrowed(floats.size());
  convert_elements(floats.data(), DType::F32, narrowed.data(), DType::F16, floats.size());
  for (size_t i = 0; i < floats.size(); ++i) ASSERT_EQ(narrowed[i], float_to_half(floats[i])) << i;
  convert_elements(floats.data(), DType::F32, narrowed.data(), DType::BF16, floats.size());
  for (size_t i = 0; i < floats.size(); ++i) {
    ASSERT_EQ(narrowed[i], float_to_bfloat16(floats[i])) << i;
  }
}

TEST(DTypes, ConvertElements) {
  const std::vector<float> f{1.5f, -2.0f, 65504.0f};
  std::vector<uint16_t> h(3);
  convert_elements(f.data(), DType::F32, h.data(), DType::F16, 3);
  EXPECT_EQ(h, (std::vector<uint16_t>{0x3e00, 0xc000, 0x7bff}));
  std::vector<float> back(3);
  convert_elements(h.data(), DType::F16, back.data(), DType::F32, 3);
  EXPECT_EQ(back, f);
  const std::vector<int64_t> i64{-3, 0, 7};
  std::vector<int32_t> i32(3);
  convert_elements(i64.data(), DType::I64, i32.data(), DType::I32, 3);
  EXPECT_EQ(i32, (std::vector<int32_t>{-3, 0, 7}));
  std::vector<float> fi(3);
  convert_elements(i32.data(), DType::I32, fi.data(), DType::F32, 3);
  EXPECT_EQ(fi, (std::vector<float>{-3, 0, 7}));
}

TEST(HostAllocator, StatsTrackAllocationsAndPeaks) {
  Allocator& a = host_allocator();
  EXPECT_TRUE(a.device().is_cpu());
  const AllocatorStats before = a.stats();
  {
    const Tensor t = Tensor::empty({1000}, DType::F32);
    const AllocatorStats during = a.stats();
    EXPECT_EQ(during.num_allocs, before.num_allocs + 1);
    EXPECT_GE(during.allocated_bytes, before.allocated_bytes + 4000);
    EXPECT_GE(during.peak_allocated_bytes, during.allocated_bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 64, 0u);
  }
  const AllocatorStats after = a.stats();
  EXPECT_EQ(after.num_frees, before.num_frees + 1);
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  EXPECT_EQ(after.reserved_bytes, before.reserved_bytes);
  EXPECT_THROW(Tensor::empty({-1}, DType::F32), Error);
  const Tensor z = Tensor::zeros({5}, DType::I64);
  EXPECT_EQ(z.to_int_vector(), std::vector<int64_t>(5, 0));
}

}  // namespace
}  // namespace voxd
