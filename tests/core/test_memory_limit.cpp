// MemoryAmount: byte counts, units, fractions of the device, and the messages for bad values.

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "core/memory_limit.h"

namespace voxd {
namespace {

constexpr uint64_t KiB = 1024;
constexpr uint64_t MiB = 1024 * KiB;
constexpr uint64_t GiB = 1024 * MiB;

uint64_t bytes_of(const std::string& text) {
  const MemoryAmount amount = MemoryAmount::parse(text, "--limit");
  EXPECT_FALSE(amount.is_fraction()) << text;
  return amount.resolve(0);
}

// The InputError message parse(text) throws; fails the test when it throws nothing.
std::string error_of(const std::string& text) {
  try {
    MemoryAmount::parse(text, "--gpu-memory-limit");
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "'" << text << "' parsed";
  return "";
}

TEST(MemoryAmount, ParsesByteCountsAndUnits) {
  EXPECT_EQ(bytes_of("8000000000"), 8000000000u);
  EXPECT_EQ(bytes_of("512MiB"), 512 * MiB);
  EXPECT_EQ(bytes_of("8GiB"), 8 * GiB);
  EXPECT_EQ(bytes_of("8GB"), 8000000000u);
  EXPECT_EQ(bytes_of("8gb"), 8000000000u);
  EXPECT_EQ(bytes_of(" 4 KiB "), 4 * KiB);
  EXPECT_EQ(bytes_of("3kb"), 3000u);
  EXPECT_EQ(bytes_of("2MB"), 2000000u);
  EXPECT_EQ(bytes_of("1TiB"), 1024 * GiB);
  EXPECT_EQ(bytes_of("1TB"), 1000000000000u);
  EXPECT_EQ(bytes_of("100B"), 100u);
  EXPECT_EQ(bytes_of("1.5GiB"), 3 * GiB / 2);
  EXPECT_EQ(bytes_of("0.5KiB"), 512u);
  EXPECT_EQ(bytes_of("1"), 1u);
}

TEST(MemoryAmount, FractionsResolveAgainstTheDeviceTotal) {
  const MemoryAmount half = MemoryAmount::parse("0.5", "--limit");
  EXPECT_TRUE(half.is_fraction());
  EXPECT_EQ(half.resolve(80 * GiB), 40 * GiB);
  EXPECT_EQ(half.resolve(1001), 500u);  // rounds down
  EXPECT_EQ(MemoryAmount::parse("1.0", "--limit").resolve(80 * GiB), 80 * GiB);
  EXPECT_EQ(MemoryAmount::parse(".25", "--limit").resolve(4 * GiB), GiB);
  EXPECT_EQ(half.to_string(), "50.0 % of the device");
  EXPECT_EQ(MemoryAmount::parse("512MiB", "--limit").to_string(), "512.00 MiB");
  EXPECT_EQ(MemoryAmount::fraction(0.25).resolve(100), 25u);
  EXPECT_EQ(MemoryAmount::bytes(7).resolve(100), 7u);
  EXPECT_EQ(MemoryAmount::bytes(7).resolve(0), 7u);
}

TEST(MemoryAmount, AFractionOfAnUnknownTotalSaysSo) {
  try {
    MemoryAmount::parse("0.5", "--gpu-memory-limit").resolve(0);
    ADD_FAILURE() << "resolved a fraction of an unknown total";
  } catch (const InputError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("--gpu-memory-limit: 50.0 % of the device needs", 0), 0u) << message;
    EXPECT_NE(message.find("give bytes"), std::string::npos) << message;
  }
}

TEST(MemoryAmount, BadValuesGiveOneClearMessage) {
  const std::string forms = "expected a byte count (8000000000), a size with a unit";
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& c :
       {Case{"", "empty value"}, Case{"   ", "empty value"},
        Case{"GiB", "'GiB' does not start with a number"},
        Case{"-1", "'-1' does not start with a number"},
        Case{".", "'.' does not start with a number"}, Case{"8G", "unknown unit in '8G'"},
        Case{"8 gigs", "unknown unit"}, Case{"1.5", "'1.5' is not a fraction in (0, 1]"},
        Case{"0.0", "'0.0' is not a fraction"}, Case{"0", "'0' is zero bytes"},
        Case{"0MiB", "zero bytes"}, Case{"1.2.3", "unknown unit in '1.2.3'"},
        Case{"99999999999999999999", "too large"}, Case{"2000000TiB", "too large"},
        Case{"2000000.5TiB", "too large"}}) {
    const std::string message = error_of(c.text);
    EXPECT_EQ(message.rfind("--gpu-memory-limit: ", 0), 0u) << c.text << ": " << message;
    EXPECT_NE(message.find(c.says), std::string::npos) << c.text << ": " << message;
    EXPECT_NE(message.find(forms), std::string::npos) << c.text << ": " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << c.text << ": " << message;
  }
  EXPECT_THROW(MemoryAmount::fraction(0), InputError);
  EXPECT_THROW(MemoryAmount::fraction(1.5), InputError);
}

TEST(MemoryAmount, ZeroBytesWhereTheOptionAllowsIt) {
  for (const char* text : {"0", "00", "0B", "0 MiB", "0.0GiB"}) {
    const MemoryAmount amount =
        MemoryAmount::parse(text, "--acoustic-graph-memory", MemoryAmount::Zero::kAllowed);
    EXPECT_FALSE(amount.is_fraction()) << text;
    EXPECT_EQ(amount.resolve(0), 0u) << text;
  }
  EXPECT_EQ(MemoryAmount::parse("64MiB", "--x", MemoryAmount::Zero::kAllowed).resolve(0),
            uint64_t{64} << 20);
  // A fraction is never zero: "0.0" without a unit is still refused.
  EXPECT_THROW(MemoryAmount::parse("0.0", "--x", MemoryAmount::Zero::kAllowed), InputError);
}

}  // namespace
}  // namespace voxd
