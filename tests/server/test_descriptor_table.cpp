// Growing the process's descriptor table ahead of a burst of connections.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <filesystem>
#include <iterator>

#include "server/descriptor_table.h"

namespace voxd::server {
namespace {

size_t open_descriptors() {
  const std::filesystem::directory_iterator entries("/proc/self/fd");
  return static_cast<size_t>(std::distance(begin(entries), end(entries)));
}

rlim_t open_file_limit() {
  rlimit limit{};
  EXPECT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  return limit.rlim_cur;
}

// The soft open-file limit raised to 4,096 where the hard limit allows, as the server does.
rlim_t raised_open_file_limit() {
  rlimit limit{};
  EXPECT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  if (limit.rlim_cur < 4096) {
    limit.rlim_cur = std::min<rlim_t>(4096, limit.rlim_max);
    EXPECT_EQ(setrlimit(RLIMIT_NOFILE, &limit), 0);
  }
  return open_file_limit();
}

TEST(DescriptorTable, ReservingGrowsTheTableAndLeavesNothingOpen) {
  const int before = descriptor_table_size();
  ASSERT_GT(before, 0) << "FDSize is missing from /proc/self/status";
  const int wanted =
      static_cast<int>(std::min<rlim_t>(std::max(4 * before, 2048), raised_open_file_limit()));
  ASSERT_GT(wanted, before) << "the open-file limit leaves no room to grow the table";
  const size_t open = open_descriptors();
  ASSERT_TRUE(reserve_descriptor_table(wanted));
  EXPECT_GE(descriptor_table_size(), wanted);
  EXPECT_EQ(open_descriptors(), open);
}

TEST(DescriptorTable, ACountPastTheOpenFileLimitIsRefused) {
  const int before = descriptor_table_size();
  const rlim_t limit = open_file_limit();
  ASSERT_LT(limit, static_cast<rlim_t>(1) << 30);
  EXPECT_FALSE(reserve_descriptor_table(static_cast<int>(limit) + 1));
  EXPECT_FALSE(reserve_descriptor_table(0));
  EXPECT_EQ(descriptor_table_size(), before);
}

}  // namespace
}  // namespace voxd::server
