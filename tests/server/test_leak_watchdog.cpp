// LeakWatchdog with a fake memory reading: a leak is reported only after the configured number
// of idle readings in a row, once per amount, and cleared by a clean idle reading; busy
// readings never report.

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "server/leak_watchdog.h"

namespace voxd::server {
namespace {

class LeakWatchdogTest : public ::testing::Test {
 protected:
  IdleMemoryReading reading_;
  MetricsRegistry metrics_;
  LeakWatchdog watchdog_{[this] { return reading_; }, metrics_, 3};

  double leak_gauge() { return metrics_.gauge("voxd_memory_leak_bytes", "").value(); }
  double findings() { return metrics_.counter("voxd_memory_leaks_detected_total", "").value(); }
  void set(bool idle, uint64_t unexplained) {
    reading_ = {idle, unexplained, "summary with " + std::to_string(unexplained) + " bytes"};
  }
};

TEST_F(LeakWatchdogTest, CleanIdleServerReportsNothing) {
  set(true, 0);
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(watchdog_.check());
  EXPECT_EQ(leak_gauge(), 0);
  EXPECT_EQ(findings(), 0);
  EXPECT_NE(metrics_.render().find("voxd_memory_leak_bytes 0"), std::string::npos);
}

TEST_F(LeakWatchdogTest, BusyServerNeverReports) {
  set(false, 1 << 20);
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(watchdog_.check());
  EXPECT_EQ(leak_gauge(), 0);
  EXPECT_EQ(findings(), 0);
}

TEST_F(LeakWatchdogTest, ReportsAfterConsecutiveIdleReadingsOnce) {
  set(true, 4096);
  EXPECT_FALSE(watchdog_.check());
  EXPECT_FALSE(watchdog_.check());
  EXPECT_EQ(leak_gauge(), 0);
  EXPECT_TRUE(watchdog_.check());
  EXPECT_EQ(leak_gauge(), 4096);
  EXPECT_EQ(findings(), 1);
  EXPECT_EQ(watchdog_.reported_bytes(), 4096u);
  // The same amount again: the gauge stays, no second finding.
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(watchdog_.check());
  EXPECT_EQ(leak_gauge(), 4096);
  EXPECT_EQ(findings(), 1);
  // It grows: a new finding at once, since the run goes on.
  set(true, 8192);
  EXPECT_TRUE(watchdog_.check());
  EXPECT_EQ(leak_gauge(), 8192);
  EXPECT_EQ(findings(), 2);
}

TEST_F(LeakWatchdogTest, BusyReadingBreaksTheRun) {
  set(true, 100);
  EXPECT_FALSE(watchdog_.check());
  EXPECT_FALSE(watchdog_.check());
  set(false, 100);
  EXPECT_FALSE(watchdog_.check());
  set(true, 100);
  EXPECT_FALSE(watchdog_.check());
  EXPECT_FALSE(watchdog_.check());
  EXPECT_EQ(findings(), 0);
  EXPECT_TRUE(watchdog_.check());
  EXPECT_EQ(findings(), 1);
}

TEST_F(LeakWatchdogTest, CleanIdleReadingClearsTheGaugeAndAllowsANewReport) {
  set(true, 100);
  for (int i = 0; i < 3; ++i) watchdog_.check();
  EXPECT_EQ(findings(), 1);
  set(true, 0);
  EXPECT_FALSE(watchdog_.check());
  EXPECT_EQ(leak_gauge(), 0);
  EXPECT_EQ(watchdog_.reported_bytes(), 0u);
  set(true, 100);
  EXPECT_FALSE(watchdog_.check());
  EXPECT_FALSE(watchdog_.check());
  EXPECT_TRUE(watchdog_.check());
  EXPECT_EQ(findings(), 2);
}

TEST(LeakWatchdog, NeedsAtLeastOneReading) {
  MetricsRegistry metrics;
  EXPECT_THROW(LeakWatchdog([] { return IdleMemoryReading{}; }, metrics, 0), Error);
}

}  // namespace
}  // namespace voxd::server
