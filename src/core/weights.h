// Named host tensors a model loads its parameters from: a safetensors file, or tensors a test
// builds in memory. Models read weights only through this interface.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace voxd {

class WeightSource {
 public:
  virtual ~WeightSource() = default;

  virtual bool contains(const std::string& name) const = 0;
  // The tensor called `name`, on the host, in the dtype it was stored in. Throws voxd::Error
  // naming the tensor and describe() when it is missing.
  virtual Tensor get(const std::string& name) const = 0;
  virtual std::vector<std::string> names() const = 0;
  // Where the weights come from, for messages ("file voices/x/acoustic.safetensors").
  virtual std::string describe() const = 0;
};

// Weights held in memory; for tests and for weights a loader derives.
class TensorMapSource final : public WeightSource {
 public:
  explicit TensorMapSource(std::map<std::string, Tensor> tensors, std::string description)
      : tensors_(std::move(tensors)), description_(std::move(description)) {}

  bool contains(const std::string& name) const override { return tensors_.count(name) != 0; }
  Tensor get(const std::string& name) const override;
  std::vector<std::string> names() const override;
  std::string describe() const override { return description_; }

 private:
  std::map<std::string, Tensor> tensors_;
  std::string description_;
};

}  // namespace voxd
