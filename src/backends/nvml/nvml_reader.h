// Readings of NVIDIA devices from NVML (the library behind nvidia-smi): memory used and total,
// GPU and memory utilisation, the device's name and the driver version. NVML is opened with
// dlopen at run time, so voxd builds and runs without it; where libnvidia-ml.so.1 is missing
// (machines without an NVIDIA driver, CI) every reading says so and why. Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "core/memory_summary.h"

namespace voxd {

class NvmlReader {
 public:
  static constexpr const char* kLibrary = "libnvidia-ml.so.1";

  // Opens `library` and initialises NVML. Never throws: when either fails, available() is false
  // and reason() says why.
  explicit NvmlReader(const std::string& library = kLibrary);
  // Shuts NVML down and closes the library.
  ~NvmlReader();
  NvmlReader(const NvmlReader&) = delete;
  NvmlReader& operator=(const NvmlReader&) = delete;

  bool available() const { return api_ != nullptr; }
  // Why NVML is unavailable; empty when it is available.
  const std::string& reason() const { return reason_; }

  // The device with NVML index `index` (CUDA's ordinal only when CUDA_VISIBLE_DEVICES is unset
  // and CUDA_DEVICE_ORDER=PCI_BUS_ID; prefer read_pci_bus_id). Never throws: a failed call gives
  // an unavailable reading naming the call and NVML's error.
  DeviceReading read(unsigned index) const;
  // The device at PCI bus id `pci_bus_id` ("0000:3B:00.0", as cudaDeviceGetPCIBusId gives it).
  DeviceReading read_pci_bus_id(const std::string& pci_bus_id) const;

 private:
  struct Api;
  DeviceReading read_handle(void* device) const;

  void* library_ = nullptr;
  std::unique_ptr<Api> api_;
  std::string reason_;
};

}  // namespace voxd
