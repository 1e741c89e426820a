// Reading and writing safetensors files, the weights format voxd loads models from. A file is
// memory-mapped read-only and fully validated when opened; the tensors it hands out view the
// mapping without copying.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/weights.h"

namespace voxd {

// Where one tensor lies in a safetensors file, known without touching its data.
struct TensorInfo {
  DType dtype = DType::F32;
  Shape shape;
  // Byte offset of the first element from the start of the file.
  size_t offset = 0;
  // Bytes the tensor occupies (numel × dtype size).
  size_t nbytes = 0;
};

// A validated, memory-mapped safetensors file. Tensors returned by get() are zero-copy views
// whose storage keeps the mapping alive, so they may outlive the SafetensorsFile. A tensor whose
// data is not aligned to its element size (possible in files written by other tools) is returned
// as an aligned heap copy instead. The file must not be truncated while it is mapped.
class SafetensorsFile final : public WeightSource {
 public:
  struct Mapping;

  // Maps and validates `path`; throws voxd::Error naming the file (and the tensor, where one is
  // at fault) when the file is unreadable or malformed in any way.
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);

  bool contains(const std::string& name) const override { return tensors_.count(name) != 0; }
  Tensor get(const std::string& name) const override;
  // Tensor names in sorted order.
  std::vector<std::string> names() const override;
  std::string describe() const override { return "safetensors file " + path_; }

  // Location, dtype and shape of `name`; throws voxd::Error when it is missing.
  TensorInfo info(const std::string& name) const;
  // The "__metadata__" string map (empty when the file has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Sum of the byte sizes of all tensors.
  size_t total_bytes() const;
  // The whole file as mapped.
  std::span<const uint8_t> file_bytes() const;
  const std::string& path() const { return path_; }

 private:
  SafetensorsFile() = default;

  std::string path_;
  std::shared_ptr<const Mapping> mapping_;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Writes host tensors (any dtype, any strides; stored contiguous) and `metadata` to `path` as
// safetensors. Every tensor's data is aligned to its element size. The file is written under a
// temporary name and renamed into place, so `path` is never left half-written. Throws
// voxd::Error on a non-host or undefined tensor, an invalid name, or an I/O failure.
void write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace voxd
