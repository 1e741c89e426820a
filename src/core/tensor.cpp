#include "core/tensor.h"

#include <cstring>
#include <numeric>
#include <sstream>

#include "core/error.h"

namespace voxd {

Storage::Storage(void* data, size_t bytes, Device device, std::function<void(void*)> release)
    : data_(data), bytes_(bytes), device_(device), release_(std::move(release)) {}

Storage::~Storage() {
  if (release_) release_(data_);
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

int64_t shape_numel(const Shape& shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<int64_t>());
}

std::string shape_to_string(const Shape& shape) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Allocator& allocator) {
  for (int64_t s : shape) {
    if (s < 0) throw Error("Tensor::empty: negative size in shape " + shape_to_string(shape));
  }
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  Allocator* source = &allocator;
  void* data = source->allocate(bytes);
  Tensor t;
  t.storage_ = std::make_shared<Storage>(data, bytes, source->device(),
                                         [source, bytes](void* p) { source->deallocate(p, bytes); });
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Allocator& allocator) {
  VOXD_CHECK(allocator.device().is_cpu(), "Tensor::zeros needs a host allocator");
  Tensor t = empty(shape, dtype, allocator);
  std::memset(t.raw_data(), 0, t.nbytes());
  return t;
}

Tensor Tensor::from_vector(const Shape& shape, const std::vector<float>& values) {
  VOXD_CHECK(shape_numel(shape) == static_cast<int64_t>(values.size()),
             "from_vector: " + std::to_string(values.size()) + " values for shape " +
                 shape_to_string(shape));
  Tensor t = empty(shape, DType::F32);
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(float));
  return t;
}

Tensor Tensor::from_vector(const Shape& shape, const std::vector<int64_t>& values) {
  VOXD_CHECK(shape_numel(shape) == static_cast<int64_t>(values.size()),
             "from_vector: " + std::to_string(values.size()) + " values for shape " +
                 shape_to_string(shape));
  Tensor t = empty(shape, DType::I64);
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(int64_t));
  return t;
}

Tensor Tensor::borrow(void* data, const Shape& shape, DType dtype, Device device,
                      std::shared_ptr<const void> keepalive) {
  Tensor t;
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  t.storage_ = std::make_shared<Storage>(data, bytes, device,
                                         [keepalive = std::move(keepalive)](void*) {});
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  return t;
}

int64_t Tensor::size(int64_t d) const {
  const int64_t n = dim();
  if (d < 0) d += n;
  VOXD_CHECK(d >= 0 && d < n, "dimension " + std::to_string(d) + " of " + shape_string());
  return shape_[static_cast<size_t>(d)];
}

int64_t Tensor::numel() const { return shape_numel(shape_); }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] != 1 && strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  if (!storage_) return nullptr;
  return static_cast<char*>(storage_->data()) + byte_offset_;
}

namespace {
int64_t normalize_dim(int64_t d, int64_t rank, const char* op) {
  if (d < 0) d += rank;
  if (d < 0 || d >= rank) {
    throw Error(std::string(op) + ": dimension out of range for rank " + std::to_string(rank));
  }
  return d;
}
}  // namespace

Tensor Tensor::reshape(const Shape& shape) const {
  VOXD_CHECK(is_contiguous(), "reshape of a non-contiguous tensor " + shape_string());
  Shape resolved = shape;
  int64_t known = 1;
  int inferred = -1;
  for (size_t i = 0; i < resolved.size(); ++i) {
    if (resolved[i] == -1) {
      VOXD_CHECK(inferred < 0, "reshape: more than one -1");
      inferred = static_cast<int>(i);
    } else {
      known *= resolved[i];
    }
  }
  if (inferred >= 0) resolved[static_cast<size_t>(inferred)] = known ? numel() / known : 0;
  if (shape_numel(resolved) != numel()) {
    throw Error("reshape: cannot view " + shape_string() + " as " + shape_to_string(shape));
  }
  Tensor t = *this;
  t.shape_ = resolved;
  t.strides_ = contiguous_strides(resolved);
  return t;
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  d0 = normalize_dim(d0, dim(), "transpose");
  d1 = normalize_dim(d1, dim(), "transpose");
  Tensor t = *this;
  std::swap(t.shape_[d0], t.shape_[d1]);
  std::swap(t.strides_[d0], t.strides_[d1]);
  return t;
}

Tensor Tensor::permute(const std::vector<int64_t>& order) const {
  VOXD_CHECK(static_cast<int64_t>(order.size()) == dim(), "permute: wrong number of dims");
  Tensor t = *this;
  for (size_t i = 0; i < order.size(); ++i) {
    const int64_t d = normalize_dim(order[i], dim(), "permute");
    t.shape_[i] = shape_[d];
    t.strides_[i] = strides_[d];
  }
  return t;
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = normalize_dim(d, dim(), "narrow");
  VOXD_CHECK(start >= 0 && length >= 0 && start + length <= shape_[d],
             "narrow(" + std::to_string(start) + ", " + std::to_string(length) + ") of " +
                 shape_string());
  Tensor t = *this;
  t.byte_offset_ += static_cast<size_t>(start * strides_[d]) * dtype_size(dtype_);
  t.shape_[d] = length;
  return t;
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  d = normalize_dim(d, dim(), "select");
  Tensor t = narrow(d, index, 1);
  t.shape_.erase(t.shape_.begin() + d);
  t.strides_.erase(t.strides_.begin() + d);
  return t;
}

Tensor Tensor::unsqueeze(int64_t d) const {
  if (d < 0) d += dim() + 1;
  VOXD_CHECK(d >= 0 && d <= dim(), "unsqueeze dimension");
  Tensor t = *this;
  const int64_t stride = d < dim() ? strides_[d] * shape_[d] : 1;
  t.shape_.insert(t.shape_.begin() + d, 1);
  t.strides_.insert(t.strides_.begin() + d, stride);
  return t;
}

Tensor Tensor::squeeze(int64_t d) const {
  d = normalize_dim(d, dim(), "squeeze");
  VOXD_CHECK(shape_[d] == 1, "squeeze of a dimension of size " + std::to_string(shape_[d]));
  Tensor t = *this;
  t.shape_.erase(t.shape_.begin() + d);
  t.strides_.erase(t.strides_.begin() + d);
  return t;
}

Tensor Tensor::to_host_contiguous(DType dtype, Allocator& allocator) const {
  VOXD_CHECK(device().is_cpu(), "to_host_contiguous on a " + device().to_string() + " tensor");
  Tensor out = empty(shape_, dtype, allocator);
  const size_t elem = dtype_size(dtype_);
  const char* base = static_cast<const char*>(raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  const size_t dst_elem = dtype_size(dtype);
  if (is_contiguous()) {
    convert_elements(base, dtype_, dst, dtype, static_cast<size_t>(numel()));
    return out;
  }
  const int64_t n = numel();
  std::vector<int64_t> index(shape_.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t offset = 0;
    for (size_t d = 0; d < shape_.size(); ++d) offset += index[d] * strides_[d];
    convert_elements(base + offset * static_cast<int64_t>(elem), dtype_,
                     dst + static_cast<size_t>(i) * dst_elem, dtype, 1);
    for (size_t d = shape_.size(); d-- > 0;) {
      if (++index[d] < shape_[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

std::vector<float> Tensor::to_float_vector() const {
  Tensor c = to_host_contiguous(DType::F32);
  const float* p = c.data<float>();
  return std::vector<float>(p, p + c.numel());
}

std::vector<int64_t> Tensor::to_int_vector() const {
  Tensor c = to_host_contiguous(DType::I64);
  const int64_t* p = c.data<int64_t>();
  return std::vector<int64_t>(p, p + c.numel());
}

std::string Tensor::shape_string() const { return shape_to_string(shape_); }

}  // namespace voxd
