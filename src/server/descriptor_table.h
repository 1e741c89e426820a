// The kernel's table of this process's file descriptors, grown before a server needs it. Linux
// doubles the table when a new descriptor does not fit, and in a process with several threads
// each doubling waits for an RCU grace period (fs/file.c, expand_fdtable) while no descriptor
// can be installed: under a burst of connections the accepts stop for that long at 128, 256,
// 512, 1,024, ... descriptors (12-44 ms apiece on a 16-core GPU host with its cores busy,
// bench/descriptor_table_bench.cpp). The table never shrinks, so growing it once at start-up
// takes those waits out of the burst.
#pragma once

namespace voxd::server {

// Grows the table to hold descriptors 0 .. `count` - 1 (by duplicating a descriptor to
// `count` - 1 and closing it; no descriptor stays open). False when it could not: `count`
// reaches the open-file limit (RLIMIT_NOFILE), or the system refused.
bool reserve_descriptor_table(int count);

// The table's size now (FDSize in /proc/self/status), or -1 where that cannot be read.
int descriptor_table_size();

}  // namespace voxd::server
