// Where a tensor's memory lives: host memory or one CUDA device.
#pragma once

#include <string>

namespace voxd {

enum class DeviceKind { Cpu, Cuda };

struct Device {
  DeviceKind kind = DeviceKind::Cpu;
  int index = 0;

  static Device cpu() { return {DeviceKind::Cpu, 0}; }
  static Device cuda(int index) { return {DeviceKind::Cuda, index}; }
  bool is_cpu() const { return kind == DeviceKind::Cpu; }
  bool operator==(const Device&) const = default;
  std::string to_string() const {
    return kind == DeviceKind::Cpu ? "cpu" : "cuda:" + std::to_string(index);
  }
};

}  // namespace voxd
