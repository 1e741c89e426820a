// Element types a tensor can hold, their sizes, and scalar conversions between them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace voxd {

enum class DType : uint8_t { F32, F16, BF16, I32, I64 };

// Bytes per element.
size_t dtype_size(DType dtype);
// Name as safetensors writes it: "F32", "F16", "BF16", "I32", "I64".
std::string_view dtype_name(DType dtype);
// Parses a safetensors dtype name; returns false for names voxd does not support.
bool parse_dtype(std::string_view name, DType* out);
bool is_floating(DType dtype);

// IEEE binary16 and bfloat16 conversions (round to nearest even).
uint16_t float_to_half(float value);
float half_to_float(uint16_t bits);
uint16_t float_to_bfloat16(float value);
float bfloat16_to_float(uint16_t bits);

// Converts `count` elements of `src` (type `from`) into `dst` (type `to`).
void convert_elements(const void* src, DType from, void* dst, DType to, size_t count);

}  // namespace voxd
