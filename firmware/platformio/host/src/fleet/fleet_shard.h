// The resources of a fleet: file descriptors, threads, worker processes.
// The core waits on its socket with select() (plain_tcp.cpp), and FD_SET on a descriptor >= FD_SETSIZE
// (1024) writes outside the fd_set. So one process runs at most FD_SETSIZE - (descriptors already
// open) - kFdReserve devices; a larger share of a fleet (the devices this host runs, fleet_share.h) is split
// into worker processes (fork before any thread, the share's j-th device in worker j % K), each still one
// std::thread per device, all on the fleet's start schedule.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fleet_device.h"

namespace fleet {

constexpr long kFdReserve = 16;  // the key log, a send log being written, summary, /proc reads, DNS

struct ProcStats {
  double user_s = 0;
  double sys_s = 0;
  long max_rss_kb = 0;  // peak RSS (VmHWM); with workers the sum of every process's peak
  int processes = 1;
};

// Open descriptors of this process now.
long count_open_fds();
// Devices one process may run with open_fds already open.
uint32_t devices_per_process(long open_fds);
// RLIMIT_NOFILE (and RLIMIT_NPROC for the threads) for `per_process` devices in each process: the soft
// limits are raised up to the hard ones when needed. `what`: the devices, for the message ("--devices 100", or
// "share 1's 50 devices"). false with the message (InvalidArgument).
bool ensure_limits(const std::string& what, uint32_t devices, uint32_t per_process, long open_fds, std::string* error);

// Runs every device of the plan's share (FleetOptions::share): in this process when shards == 1, else in `shards`
// worker processes. out: one result per device of the share, in its order (ascending global index);
// keylog_failed: a key-log write failed in any process.
// Returns the stopping signal, 0 when none.
int run_fleet(const FleetPlan& p, uint32_t shards, std::vector<DeviceResult>* out, ProcStats* stats,
              bool* keylog_failed);

// This process's CPU and peak RSS (getrusage RUSAGE_SELF, /proc/self/status VmHWM).
ProcStats self_stats();

}  // namespace fleet
