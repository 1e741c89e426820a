// NvmlReader without a GPU: a missing library, a library that is not NVML and a failing
// nvmlInit_v2 leave it unavailable with the reason; a fake libnvidia-ml (fake_nvml.cpp) gives
// readings; the memory summary shows both kinds in its table and its JSON.

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "backends/nvml/nvml_reader.h"
#include "core/memory_summary.h"

namespace voxd {
namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Every line of a summary is 77 characters wide: 75 between the outer bars.
void expect_boxed(const std::string& text) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    EXPECT_EQ(line.size(), 77u) << "'" << line << "'";
    EXPECT_EQ(line.front(), '|') << line;
    EXPECT_EQ(line.back(), '|') << line;
  }
}

TEST(NvmlReader, AMissingLibraryLeavesItUnavailableWithTheReason) {
  const NvmlReader reader("libvoxd-no-such-nvml.so.1");
  EXPECT_FALSE(reader.available());
  EXPECT_TRUE(contains(reader.reason(), "cannot load libvoxd-no-such-nvml.so.1"))
      << reader.reason();
  EXPECT_TRUE(contains(reader.reason(), "NVML ships with the NVIDIA driver")) << reader.reason();
  for (const DeviceReading& reading : {reader.read(0), reader.read_pci_bus_id("0000:01:00.0")}) {
    EXPECT_FALSE(reading.available);
    EXPECT_EQ(reading.source, "NVML");
    EXPECT_EQ(reading.reason, reader.reason());
    EXPECT_EQ(reading.total_bytes, 0u);
  }
}

TEST(NvmlReader, TheSystemLibraryIsReadOrItsAbsenceExplained) {
  const NvmlReader reader;
  if (reader.available()) {
    EXPECT_TRUE(reader.reason().empty());
  } else {
    EXPECT_TRUE(contains(reader.reason(), "libnvidia-ml.so.1")) << reader.reason();
    EXPECT_FALSE(reader.read(0).available);
  }
}

TEST(NvmlReader, ALibraryThatIsNotNvmlIsRefused) {
  const NvmlReader reader("libm.so.6");
  EXPECT_FALSE(reader.available());
  EXPECT_TRUE(contains(reader.reason(), "libm.so.6 lacks nvmlInit_v2, nvmlShutdown"))
      << reader.reason();
}

TEST(NvmlReader, AFailingInitIsReportedWithNvmlsError) {
  const NvmlReader reader(FAKE_NVML_INIT_FAILS_PATH);
  EXPECT_FALSE(reader.available());
  EXPECT_EQ(reader.reason(), "nvmlInit_v2 failed: Driver Not Loaded (NVML error 9)");
}

TEST(NvmlReader, ReadsTheDeviceByIndexAndByPciBusId) {
  const NvmlReader reader(FAKE_NVML_PATH);
  ASSERT_TRUE(reader.available()) << reader.reason();
  for (const DeviceReading& reading : {reader.read(0), reader.read_pci_bus_id("0000:01:00.0")}) {
    ASSERT_TRUE(reading.available) << reading.reason;
    EXPECT_EQ(reading.source, "NVML");
    EXPECT_EQ(reading.name, "Fake GPU 80GB");
    EXPECT_EQ(reading.driver_version, "999.12.3");
    EXPECT_EQ(reading.total_bytes, 80ull << 30);
    EXPECT_EQ(reading.used_bytes, 3ull << 30);
    EXPECT_EQ(reading.gpu_utilization, 42u);
    EXPECT_EQ(reading.memory_utilization, 7u);
  }
  const DeviceReading missing = reader.read(1);
  EXPECT_FALSE(missing.available);
  EXPECT_EQ(missing.reason,
            "nvmlDeviceGetHandleByIndex_v2 failed: Invalid Argument (NVML error 2) for index 1");
  EXPECT_EQ(reader.read_pci_bus_id("0000:02:00.0").reason,
            "nvmlDeviceGetHandleByPciBusId_v2 failed: Not Found (NVML error 6) for 0000:02:00.0");
}

TEST(NvmlReader, TheSummaryShowsAReading) {
  const DeviceReading reading = NvmlReader(FAKE_NVML_PATH).read(0);
  const std::string text = memory_summary(AllocatorStats{}, Device::cuda(0), std::nullopt, reading);
  expect_boxed(text);
  EXPECT_TRUE(contains(text, "| Device (NVML)         | Fake GPU 80GB, driver 999.12.3 ")) << text;
  EXPECT_TRUE(contains(text, "| Device memory used    | 3.00 GiB of 80.00 GiB ")) << text;
  EXPECT_TRUE(contains(text, "| Utilisation           | GPU 42 %, memory 7 % ")) << text;

  const nlohmann::json j = memory_summary_json(AllocatorStats{}, Device::cuda(0), {}, reading);
  EXPECT_EQ(j.at("device_reading").at("name"), "Fake GPU 80GB");
  EXPECT_EQ(j.at("device_reading").at("used_bytes"), 3ull << 30);
  EXPECT_EQ(j.at("device_reading").at("gpu_utilization"), 42);
  EXPECT_TRUE(j.at("device_reading").at("available").get<bool>());
  EXPECT_FALSE(j.contains("breakdown"));

  DeviceReading no_utilization = reading;
  no_utilization.gpu_utilization.reset();
  no_utilization.memory_utilization.reset();
  EXPECT_TRUE(contains(memory_summary(AllocatorStats{}, Device::cuda(0), {}, no_utilization),
                       "| Utilisation           | GPU n/a, memory n/a "));
  EXPECT_TRUE(memory_summary_json(AllocatorStats{}, Device::cuda(0), {}, no_utilization)
                  .at("device_reading")
                  .at("gpu_utilization")
                  .is_null());
}

TEST(NvmlReader, TheSummaryWrapsTheReasonForNoReading) {
  const DeviceReading reading = NvmlReader("libvoxd-no-such-nvml.so.1").read(0);
  const std::string text = memory_summary(AllocatorStats{}, Device::cuda(0), std::nullopt, reading);
  expect_boxed(text);
  EXPECT_TRUE(contains(text, "| Device (NVML)         | unavailable: cannot load ")) << text;
  EXPECT_TRUE(contains(text, "|                       | ")) << text;  // a continued line
  const nlohmann::json j = memory_summary_json(AllocatorStats{}, Device::cuda(0), {}, reading);
  EXPECT_FALSE(j.at("device_reading").at("available").get<bool>());
  EXPECT_EQ(j.at("device_reading").at("reason"), reading.reason);
  EXPECT_FALSE(j.at("device_reading").contains("used_bytes"));
}

}  // namespace
}  // namespace voxd
