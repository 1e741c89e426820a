// An n-dimensional view (shape, strides in elements, byte offset) onto shared storage. Storage
// comes from an Allocator or borrows memory another object owns (a memory-mapped weights file);
// copying a Tensor shares the storage, it never copies elements.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/device.h"
#include "core/dtype.h"

namespace voxd {

using Shape = std::vector<int64_t>;

// A block of bytes on one device. Releases itself through `release` when the last tensor
// viewing it goes away.
class Storage {
 public:
  Storage(void* data, size_t bytes, Device device, std::function<void(void*)> release);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_;
  size_t bytes_;
  Device device_;
  std::function<void(void*)> release_;
};

class Tensor {
 public:
  Tensor() = default;

  // New contiguous tensor with uninitialised elements from `allocator`.
  static Tensor empty(const Shape& shape, DType dtype, Allocator& allocator = host_allocator());
  // New contiguous tensor filled with zeros (host memory only).
  static Tensor zeros(const Shape& shape, DType dtype, Allocator& allocator = host_allocator());
  // Host tensor holding a copy of `values`.
  static Tensor from_vector(const Shape& shape, const std::vector<float>& values);
  static Tensor from_vector(const Shape& shape, const std::vector<int64_t>& values);
  // View onto memory owned elsewhere; `keepalive` is held as long as the view lives.
  static Tensor borrow(void* data, const Shape& shape, DType dtype, Device device,
                       std::shared_ptr<const void> keepalive);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  // Size of dimension `d`; negative `d` counts from the end.
  int64_t size(int64_t d) const;
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  void* raw_data() const;
  template <typename T>
  T* data() const {
    return static_cast<T*>(raw_data());
  }

  // Views sharing storage. reshape() requires a contiguous tensor; one size may be -1.
  Tensor reshape(const Shape& shape) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor permute(const std::vector<int64_t>& order) const;
  // Elements [start, start + length) of dimension `d`.
  Tensor narrow(int64_t d, int64_t start, int64_t length) const;
  Tensor select(int64_t d, int64_t index) const;
  Tensor unsqueeze(int64_t d) const;
  Tensor squeeze(int64_t d) const;

  // Host only: a contiguous copy converted to `dtype` (same dtype gives a contiguous copy).
  Tensor to_host_contiguous(DType dtype, Allocator& allocator = host_allocator()) const;
  // Host only: elements as floats / int64s in row-major order, whatever the strides.
  std::vector<float> to_float_vector() const;
  std::vector<int64_t> to_int_vector() const;

  std::string shape_string() const;

 private:
  std::shared_ptr<Storage> storage_;
  size_t byte_offset_ = 0;
  Shape shape_;
  Shape strides_;
  DType dtype_ = DType::F32;
};

Shape contiguous_strides(const Shape& shape);
int64_t shape_numel(const Shape& shape);
std::string shape_to_string(const Shape& shape);

}  // namespace voxd
