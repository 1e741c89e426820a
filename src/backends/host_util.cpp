#include "backends/host_util.h"

#include <cstring>
#include <string>

#include "core/error.h"

namespace voxd::host {

void require_f32(const char* kernel, const char* name, const Tensor& t) {
  const std::string where = std::string(kernel) + ": " + name;
  if (!t.defined()) throw Error(where + " is undefined");
  if (!t.device().is_cpu()) throw Error(where + " is on " + t.device().to_string());
  if (!t.is_contiguous()) throw Error(where + " " + t.shape_string() + " is not contiguous");
  if (t.dtype() != DType::F32) {
    throw Error(where + " has dtype " + std::string(dtype_name(t.dtype())) +
                ", this backend computes in F32");
  }
}

void require_shape(const char* kernel, const char* name, const Tensor& t, const Shape& shape) {
  if (t.shape() != shape) {
    throw Error(std::string(kernel) + ": " + name + " is " + t.shape_string() + ", expected " +
                shape_to_string(shape));
  }
}

void strided_copy(const Tensor& src, Tensor& dst) {
  if (!src.device().is_cpu() || !dst.device().is_cpu()) {
    throw Error("copy: host backends copy only between host tensors, got " +
                src.device().to_string() + " -> " + dst.device().to_string());
  }
  if (!dst.is_contiguous()) throw Error("copy: destination " + dst.shape_string() + " is strided");
  if (src.numel() != dst.numel()) {
    throw Error("copy: source " + src.shape_string() + " and destination " + dst.shape_string() +
                " differ in size");
  }
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
  if (!dst.device().is_cpu() || !dst.is_contiguous()) {
    throw Error("fill: destination " + dst.shape_string() + " must be a contiguous host tensor");
  }
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

void check_embedding(const Tensor& ids, const Tensor& table, const Tensor& out) {
  require_f32("embedding", "table", table);
  require_f32("embedding", "out", out);
  if (!ids.device().is_cpu() || !ids.is_contiguous() ||
      (ids.dtype() != DType::I32 && ids.dtype() != DType::I64)) {
    throw Error("embedding: ids " + ids.shape_string() + " must be contiguous host I32 or I64");
  }
  require_shape("embedding", "out", out, {ids.numel(), table.size(1)});
}

void check_length_regulate(const Tensor& x, const std::vector<std::vector<int64_t>>& durations,
                           const Tensor& out) {
  require_f32("length_regulate", "x", x);
  require_f32("length_regulate", "out", out);
  require_shape("length_regulate", "out", out, {x.size(0), out.size(1), x.size(2)});
  for (const auto& dur : durations) {
    if (static_cast<int64_t>(dur.size()) != x.size(1)) {
      throw Error("length_regulate: " + std::to_string(dur.size()) + " durations for " +
                  std::to_string(x.size(1)) + " rows");
    }
  }
}

void check_bucketize(const Tensor& x, const Tensor& boundaries, const Tensor& out) {
  require_f32("bucketize", "x", x);
  require_f32("bucketize", "boundaries", boundaries);
  if (out.dtype() != DType::I64 || !out.is_contiguous() || out.shape() != x.shape()) {
    throw Error("bucketize: out must be a contiguous I64 tensor shaped like x " + x.shape_string());
  }
}

[[noreturn]] void throw_durations_exceed(int64_t b, int64_t frames) {
  throw Error("length_regulate: durations of batch " + std::to_string(b) + " exceed the output's " +
              std::to_string(frames) + " frames");
}

}  // namespace voxd::host
