#include "backends/nvml/nvml_reader.h"

#include <dlfcn.h>

#include <memory>
#include <string>
#include <type_traits>
#include <utility>

namespace voxd {
namespace {

// The parts of nvml.h this file needs, as NVML's ABI defines them.
using nvmlReturn_t = int;
constexpr nvmlReturn_t NVML_SUCCESS = 0;
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};
// NVML_DEVICE_NAME_V2_BUFFER_SIZE and NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE are 96 and 80.
constexpr unsigned kNameBuffer = 96;
constexpr unsigned kDriverBuffer = 80;

DeviceReading unavailable(const std::string& reason) {
  DeviceReading reading;
  reading.source = "NVML";
  reading.reason = reason;
  return reading;
}

}  // namespace

// NVML's entry points, resolved from the library.
struct NvmlReader::Api {
  nvmlReturn_t (*init)();
  nvmlReturn_t (*shutdown)();
  nvmlReturn_t (*get_handle_by_index)(unsigned int, nvmlDevice_t*);
  nvmlReturn_t (*get_handle_by_pci_bus_id)(const char*, nvmlDevice_t*);
  nvmlReturn_t (*get_memory_info)(nvmlDevice_t, nvmlMemory_t*);
  nvmlReturn_t (*get_utilization_rates)(nvmlDevice_t, nvmlUtilization_t*);
  nvmlReturn_t (*get_name)(nvmlDevice_t, char*, unsigned int);
  nvmlReturn_t (*get_driver_version)(char*, unsigned int);
  const char* (*error_string)(nvmlReturn_t);

  std::string error(const char* call, nvmlReturn_t status) const {
    return std::string(call) + " failed: " + error_string(status) + " (NVML error " +
           std::to_string(status) + ")";
  }
};

NvmlReader::NvmlReader(const std::string& library) {
  library_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library_ == nullptr) {
    const char* why = dlerror();
    reason_ = "cannot load " + library + " (" + (why != nullptr ? why : "dlopen failed") +
              "); NVML ships with the NVIDIA driver";
    return;
  }
  auto api = std::make_unique<Api>();
  std::string missing;
  const auto resolve = [&](auto& fn, const char* symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(library_, symbol));
    if (fn == nullptr) missing += (missing.empty() ? "" : ", ") + std::string(symbol);
  };
  resolve(api->init, "nvmlInit_v2");
  resolve(api->shutdown, "nvmlShutdown");
  resolve(api->get_handle_by_index, "nvmlDeviceGetHandleByIndex_v2");
  resolve(api->get_handle_by_pci_bus_id, "nvmlDeviceGetHandleByPciBusId_v2");
  resolve(api->get_memory_info, "nvmlDeviceGetMemoryInfo");
  resolve(api->get_utilization_rates, "nvmlDeviceGetUtilizationRates");
  resolve(api->get_name, "nvmlDeviceGetName");
  resolve(api->get_driver_version, "nvmlSystemGetDriverVersion");
  resolve(api->error_string, "nvmlErrorString");
  if (!missing.empty()) {
    reason_ = library + " lacks " + missing + " (is it NVML?)";
  } else if (const nvmlReturn_t status = api->init(); status != NVML_SUCCESS) {
    reason_ = api->error("nvmlInit_v2", status);
  } else {
    api_ = std::move(api);
    return;
  }
  dlclose(library_);
  library_ = nullptr;
}

NvmlReader::~NvmlReader() {
  if (api_ != nullptr) api_->shutdown();
  if (library_ != nullptr) dlclose(library_);
}

DeviceReading NvmlReader::read(unsigned index) const {
  if (api_ == nullptr) return unavailable(reason_);
  nvmlDevice_t device = nullptr;
  const nvmlReturn_t status = api_->get_handle_by_index(index, &device);
  if (status != NVML_SUCCESS) {
    return unavailable(api_->error("nvmlDeviceGetHandleByIndex_v2", status) + " for index " +
                       std::to_string(index));
  }
  return read_handle(device);
}

DeviceReading NvmlReader::read_pci_bus_id(const std::string& pci_bus_id) const {
  if (api_ == nullptr) return unavailable(reason_);
  nvmlDevice_t device = nullptr;
  const nvmlReturn_t status = api_->get_handle_by_pci_bus_id(pci_bus_id.c_str(), &device);
  if (status != NVML_SUCCESS) {
    return unavailable(api_->error("nvmlDeviceGetHandleByPciBusId_v2", status) + " for " +
                       pci_bus_id);
  }
  return read_handle(device);
}

DeviceReading NvmlReader::read_handle(void* handle) const {
  const auto device = static_cast<nvmlDevice_t>(handle);
  nvmlMemory_t memory{};
  if (const nvmlReturn_t status = api_->get_memory_info(device, &memory); status != NVML_SUCCESS) {
    return unavailable(api_->error("nvmlDeviceGetMemoryInfo", status));
  }
  char name[kNameBuffer] = {};
  if (const nvmlReturn_t status = api_->get_name(device, name, kNameBuffer);
      status != NVML_SUCCESS) {
    return unavailable(api_->error("nvmlDeviceGetName", status));
  }
  char driver[kDriverBuffer] = {};
  if (const nvmlReturn_t status = api_->get_driver_version(driver, kDriverBuffer);
      status != NVML_SUCCESS) {
    return unavailable(api_->error("nvmlSystemGetDriverVersion", status));
  }
  DeviceReading reading;
  reading.source = "NVML";
  reading.available = true;
  reading.name = name;
  reading.driver_version = driver;
  reading.used_bytes = memory.used;
  reading.total_bytes = memory.total;
  // Not supported on MIG instances and some older boards: the reading stands without it.
  nvmlUtilization_t utilization{};
  if (api_->get_utilization_rates(device, &utilization) == NVML_SUCCESS) {
    reading.gpu_utilization = utilization.gpu;
    reading.memory_utilization = utilization.memory;
  }
  return reading;
}

}  // namespace voxd
