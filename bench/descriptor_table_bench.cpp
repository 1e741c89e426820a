// What a burst of new descriptors costs a server process when the kernel grows its descriptor
// table on the way (server/descriptor_table.h): opens DESCRIPTORS descriptors one by one, as
// accepts under a burst do, with BUSY threads spinning on cores beside (a GPU server's device
// thread, its admission threads, a load on the same host) and one thread asleep (the process has
// several threads, as voxd serve has), and prints each open that took longer than --slow-ms, the
// slowest and the total. --reserve first grows the table as voxd serve does at start-up.
//
// The table never shrinks: one run a process.
//
//   build/bench/voxd_descriptor_table_bench [--descriptors 2048] [--busy 8] [--reserve]
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "server/descriptor_table.h"

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Opens `count` descriptors (duplicates of standard input) with `busy` threads spinning, then
// closes them; prints the slow opens and the table's size before and after.
void run(int count, int busy, double slow_ms) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  threads.emplace_back([&] {
    while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  for (int i = 0; i < busy; ++i) {
    threads.emplace_back([&] {
      while (!stop) {
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const int table_before = voxd::server::descriptor_table_size();
  std::vector<int> opened;
  double total = 0.0;
  double slowest = 0.0;
  int slowest_fd = -1;
  for (int i = 0; i < count; ++i) {
    const Clock::time_point start = Clock::now();
    const int fd = dup(STDIN_FILENO);
    const double ms = ms_since(start);
    if (fd < 0) {
      std::perror("dup");
      break;
    }
    opened.push_back(fd);
    total += ms;
    if (ms > slowest) {
      slowest = ms;
      slowest_fd = fd;
    }
    if (ms >= slow_ms) std::printf("  descriptor %d: %.2f ms\n", fd, ms);
  }
  const int table_after = voxd::server::descriptor_table_size();
  stop = true;
  for (std::thread& t : threads) t.join();
  for (int fd : opened) close(fd);
  std::printf(
      "busy threads %d: %zu opens took %.2f ms in all, the slowest %.2f ms (descriptor %d); "
      "table %d -> %d\n",
      busy, opened.size(), total, slowest, slowest_fd, table_before, table_after);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The cost of the kernel growing a process's descriptor table under a burst"};
  int descriptors = 2048;
  int busy = 0;
  bool reserve = false;
  double slow_ms = 0.5;
  app.add_option("--descriptors", descriptors, "descriptors to open")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--busy", busy, "threads spinning beside")->check(CLI::Range(0, 1024));
  app.add_flag("--reserve", reserve, "grow the table first, as voxd serve does");
  app.add_option("--slow-ms", slow_ms, "print each open slower than this");
  CLI11_PARSE(app, argc, argv);

  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 &&
      limit.rlim_cur < static_cast<rlim_t>(descriptors) + 64) {
    limit.rlim_cur = std::min<rlim_t>(static_cast<rlim_t>(descriptors) + 64, limit.rlim_max);
    setrlimit(RLIMIT_NOFILE, &limit);
  }
  if (reserve && !voxd::server::reserve_descriptor_table(descriptors + 64)) {
    std::fprintf(stderr, "could not grow the descriptor table to %d\n", descriptors + 64);
    return 1;
  }
  run(descriptors, busy, slow_ms);
  return 0;
}
