#include "backends/host_util.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/error.h"

namespace voxd::host {

void strided_copy(const Tensor& src, Tensor& dst) {
  assert(src.device().is_cpu() && dst.device().is_cpu() && dst.is_contiguous());
  assert(src.numel() == dst.numel());
  const int64_t n = src.numel();
  if (n == 0) return;
  if (src.is_contiguous()) {
    convert_elements(src.raw_data(), src.dtype(), dst.raw_data(), dst.dtype(),
                     static_cast<size_t>(n));
    return;
  }
  const auto src_elem = static_cast<int64_t>(dtype_size(src.dtype()));
  const auto dst_elem = static_cast<int64_t>(dtype_size(dst.dtype()));
  const char* base = static_cast<const char*>(src.raw_data());
  char* out = static_cast<char*>(dst.raw_data());
  const Shape& shape = src.shape();
  const Shape& strides = src.strides();
  const size_t rank = shape.size();
  // Rows along the innermost dimension, converted one contiguous run at a time when possible.
  const int64_t inner = shape[rank - 1];
  const int64_t inner_stride = strides[rank - 1];
  std::vector<int64_t> index(rank, 0);
  for (int64_t row = 0; row < n / inner; ++row) {
    int64_t offset = 0;
    for (size_t d = 0; d + 1 < rank; ++d) offset += index[d] * strides[d];
    char* dst_row = out + row * inner * dst_elem;
    if (inner_stride == 1) {
      convert_elements(base + offset * src_elem, src.dtype(), dst_row, dst.dtype(),
                       static_cast<size_t>(inner));
    } else {
      for (int64_t i = 0; i < inner; ++i) {
        convert_elements(base + (offset + i * inner_stride) * src_elem, src.dtype(),
                         dst_row + i * dst_elem, dst.dtype(), 1);
      }
    }
    for (size_t d = rank - 1; d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

void fill(Tensor& dst, float value) {
  assert(dst.device().is_cpu() && dst.is_contiguous());
  const size_t elem = dtype_size(dst.dtype());
  unsigned char pattern[8] = {};
  convert_elements(&value, DType::F32, pattern, dst.dtype(), 1);
  char* out = static_cast<char*>(dst.raw_data());
  const int64_t n = dst.numel();
  if (dst.dtype() == DType::F32) {
    float* f = dst.data<float>();
    for (int64_t i = 0; i < n; ++i) f[i] = value;
    return;
  }
  for (int64_t i = 0; i < n; ++i) std::memcpy(out + static_cast<size_t>(i) * elem, pattern, elem);
}

int64_t load_id(const Tensor& ids, int64_t i) {
  if (ids.dtype() == DType::I64) return ids.data<int64_t>()[i];
  return ids.data<int32_t>()[i];
}

int64_t bucket_index(float value, const float* boundaries, int64_t n) {
  // Same loop as PyTorch's cus_lower_bound, so NaN (which compares false) lands at n.
  int64_t start = 0;
  int64_t end = n;
  while (start < end) {
    const int64_t mid = start + ((end - start) >> 1);
    if (!(boundaries[mid] >= value)) {
      start = mid + 1;
    } else {
      end = mid;
    }
  }
  return start;
}

void throw_bad_id(int64_t id, int64_t position, int64_t vocab) {
  throw Error("embedding: id " + std::to_string(id) + " at position " + std::to_string(position) +
              " is outside the table's " + std::to_string(vocab) + " rows");
}

size_t row_bytes(const Tensor& cache) {
  size_t bytes = dtype_size(cache.dtype());
  for (int64_t d = 2; d < cache.dim(); ++d) bytes *= static_cast<size_t>(cache.size(d));
  return bytes;
}

int64_t page_row(const Tensor& page_table, int64_t b, int64_t p, int64_t page_size, int64_t pages) {
  const int64_t slot = p / page_size;
  if (p < 0 || slot >= page_table.size(1)) return -1;
  const int64_t page = page_table.data<int64_t>()[b * page_table.size(1) + slot];
  return page < 0 || page >= pages ? -1 : page * page_size + p % page_size;
}

void write_pages(Tensor& pages, const Tensor& rows, const Tensor& page_table,
                 const Tensor& positions) {
  const size_t row = row_bytes(pages);
  const int64_t t = rows.size(1);
  auto* dst = static_cast<char*>(pages.raw_data());
  const auto* src = static_cast<const char*>(rows.raw_data());
  for (int64_t b = 0; b < rows.size(0); ++b) {
    for (int64_t i = 0; i < t; ++i) {
      const int64_t at =
          page_row(page_table, b, positions.data<int64_t>()[b] + i, pages.size(1), pages.size(0));
      if (at < 0) continue;
      std::memcpy(dst + static_cast<size_t>(at) * row, src + static_cast<size_t>(b * t + i) * row,
                  row);
    }
  }
}

void rotate_half(const float* in, float* out, int64_t half, int64_t position,
                 const std::vector<float>& inv_freq) {
  for (int64_t j = 0; j < half; ++j) {
    const float angle = static_cast<float>(position) * inv_freq[static_cast<size_t>(j)];
    const double c = std::cos(static_cast<double>(angle));
    const double s = std::sin(static_cast<double>(angle));
    const double x1 = in[j];
    const double x2 = in[j + half];
    out[j] = static_cast<float>(x1 * c - x2 * s);
    out[j + half] = static_cast<float>(x2 * c + x1 * s);
  }
}

void add(const Tensor& x, const Tensor& delta, Tensor& sum) {
  const float* a = x.data<float>();
  const float* b = delta.data<float>();
  float* o = sum.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) o[i] = a[i] + b[i];
}

void swiglu(const Tensor& gate_up, Tensor& out) {
  const int64_t rows = out.size(0);
  const int64_t width = out.size(1);
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = gate_up.data<float>() + r * 2 * width;
    const float* up = gate + width;
    float* o = out.data<float>() + r * width;
    for (int64_t i = 0; i < width; ++i) {
      const double g = gate[i];
      const auto silu = static_cast<float>(g / (1.0 + std::exp(-g)));
      o[i] = silu * up[i];
    }
  }
}

void qkv_to_pages(const Tensor& qkv, Tensor& k_pages, Tensor& v_pages, const Tensor& page_table,
                  const Tensor& positions, float theta, Tensor& q_out) {
  const int64_t batch = qkv.size(0);
  const int64_t steps = qkv.size(1);
  const int64_t heads = qkv.size(3);
  const int64_t dim = qkv.size(4);
  const int64_t half = dim / 2;
  const int64_t row = heads * dim;
  const std::vector<float> inv_freq = rope_frequencies(theta, dim);
  const auto rotate = [&](const float* in, float* out, int64_t position) {
    rotate_half(in, out, half, position, inv_freq);
  };
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < steps; ++t) {
      const int64_t position = positions.data<int64_t>()[b] + t;
      const float* q = qkv.data<float>() + (b * steps + t) * 3 * row;
      const float* k = q + row;
      const float* v = k + row;
      float* q_row = q_out.data<float>() + (b * steps + t) * row;
      for (int64_t h = 0; h < heads; ++h) rotate(q + h * dim, q_row + h * dim, position);
      const int64_t at = page_row(page_table, b, position, k_pages.size(1), k_pages.size(0));
      if (at < 0) continue;
      float* k_row = k_pages.data<float>() + at * row;
      for (int64_t h = 0; h < heads; ++h) rotate(k + h * dim, k_row + h * dim, position);
      std::copy(v, v + row, v_pages.data<float>() + at * row);
    }
  }
}

int64_t sample_row(const Tensor& logits, const Tensor& history, const TokenDraw& draw, int64_t r) {
  const int64_t vocab = logits.size(1);
  const int64_t window = history.size(1);
  return sample_token(
      std::span<const float>(logits.data<float>() + r * vocab, static_cast<size_t>(vocab)), draw,
      std::span<const int64_t>(history.data<int64_t>() + r * window, static_cast<size_t>(window)));
}

}  // namespace voxd::host
