// A stand-in for libnvidia-ml.so.1 with the entry points NvmlReader uses, answering fixed values
// for one device (index 0, PCI bus id 0000:01:00.0), so the reader's success path is tested
// without a GPU. Built with FAKE_NVML_INIT_FAILS, nvmlInit_v2 fails as without a loaded driver.
#include <cstring>

namespace {

struct FakeDevice {};
FakeDevice device;

constexpr int kSuccess = 0;
constexpr int kInvalidArgument = 2;
constexpr int kNotFound = 6;
constexpr int kDriverNotLoaded = 9;

int copy_string(const char* text, char* out, unsigned length) {
  if (std::strlen(text) + 1 > length) return kInvalidArgument;
  std::strcpy(out, text);
  return kSuccess;
}

}  // namespace

extern "C" {

struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};

int nvmlInit_v2() {
#ifdef FAKE_NVML_INIT_FAILS
  return kDriverNotLoaded;
#else
  return kSuccess;
#endif
}
int nvmlShutdown() {
  return kSuccess;
}
const char* nvmlErrorString(int status) {
  switch (status) {
    case kSuccess:
      return "Success";
    case kInvalidArgument:
      return "Invalid Argument";
    case kNotFound:
      return "Not Found";
    case kDriverNotLoaded:
      return "Driver Not Loaded";
    default:
      return "Unknown Error";
  }
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** handle) {
  if (index != 0) return kInvalidArgument;
  *handle = &device;
  return kSuccess;
}
int nvmlDeviceGetHandleByPciBusId_v2(const char* id, void** handle) {
  if (std::strcmp(id, "0000:01:00.0") != 0) return kNotFound;
  *handle = &device;
  return kSuccess;
}
int nvmlDeviceGetMemoryInfo(void*, nvmlMemory_t* memory) {
  memory->total = 80ull << 30;
  memory->used = 3ull << 30;
  memory->free = memory->total - memory->used;
  return kSuccess;
}
int nvmlDeviceGetUtilizationRates(void*, nvmlUtilization_t* utilization) {
  utilization->gpu = 42;
  utilization->memory = 7;
  return kSuccess;
}
int nvmlDeviceGetName(void*, char* name, unsigned int length) {
  return copy_string("Fake GPU 80GB", name, length);
}
int nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  return copy_string("999.12.3", version, length);
}

}  // extern "C"
