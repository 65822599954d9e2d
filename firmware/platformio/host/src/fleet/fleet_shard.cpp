#include "fleet_shard.h"

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>

namespace fleet {
namespace {

double seconds(const timeval& tv) { return static_cast<double>(tv.tv_sec) + tv.tv_usec / 1e6; }

long vm_hwm_kb() {
  FILE* f = fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  long kb = -1;
  while (fgets(line, sizeof(line), f) != nullptr) {
    if (sscanf(line, "VmHWM: %ld kB", &kb) == 1) break;
  }
  fclose(f);
  return kb;
}

// Raises the soft limit of `resource` to `need` (at most the hard limit); the limit then in force.
rlim_t raise_soft(int resource, rlim_t need) {
  rlimit rl;
  if (getrlimit(resource, &rl) != 0) return RLIM_INFINITY;  // cannot tell: let the run find out
  if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= need) return rl.rlim_cur;
  rlimit raised = rl;
  raised.rlim_cur = (rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need) ? need : rl.rlim_max;
  if (setrlimit(resource, &raised) == 0) return raised.rlim_cur;
  return rl.rlim_cur;
}

std::string shard_path(const FleetPlan& p, uint32_t k) {
  return p.options->out_dir() + "/.fleet-shard-" + std::to_string(k) + ".tsv";
}

std::string one_line(const std::string& s) {
  std::string out = s;
  for (char& c : out) {
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  }
  return out;
}

bool write_shard(const std::string& path, const std::vector<DeviceResult>& rs, bool keylog_failed) {
  FILE* f = fopen(path.c_str(), "w");
  if (f == nullptr) return false;
  if (keylog_failed) fputs("#keylog_failed\n", f);
  for (const DeviceResult& r : rs) {
    fprintf(f, "%" PRIu32 "\t%" PRId64 "\t%" PRId64 "\t%" PRId64 "\t%" PRId64 "\t%" PRIu32 "\t%" PRIu32 "\t%" PRIu32
            "\t%d\t%s\t%s\n", r.index, r.t_start_us, r.tcp_connect_us, r.handshake_us, r.connack_us, r.messages,
            r.connections, r.resumed, r.connected ? 1 : 0, r.error.empty() ? "-" : r.error.c_str(),
            one_line(r.message).c_str());
  }
  return fclose(f) == 0;
}

// Device `index`'s place in the share (the results are in the share's order); share.size() when not in it.
size_t place_of(const std::vector<uint32_t>& share, uint32_t index) {
  const auto it = std::lower_bound(share.begin(), share.end(), index);
  return (it != share.end() && *it == index) ? static_cast<size_t>(it - share.begin()) : share.size();
}

// Fills the devices a worker reported; returns how many.
size_t read_shard(const std::string& path, const std::vector<uint32_t>& share, std::vector<DeviceResult>* all,
                  bool* keylog_failed) {
  FILE* f = fopen(path.c_str(), "r");
  if (f == nullptr) return 0;
  size_t n = 0;
  char line[1024];
  while (fgets(line, sizeof(line), f) != nullptr) {
    if (strncmp(line, "#keylog_failed", 14) == 0) *keylog_failed = true;
    DeviceResult r;
    int connected = 0, used = 0;
    char err[64];
    if (sscanf(line, "%" SCNu32 "\t%" SCNd64 "\t%" SCNd64 "\t%" SCNd64 "\t%" SCNd64 "\t%" SCNu32 "\t%" SCNu32 "\t%" SCNu32
               "\t%d\t%63s\t%n", &r.index, &r.t_start_us, &r.tcp_connect_us, &r.handshake_us, &r.connack_us,
               &r.messages, &r.connections, &r.resumed, &connected, err, &used) < 10) {
      continue;
    }
    const size_t at = place_of(share, r.index);
    if (at >= all->size()) continue;
    r.connected = connected != 0;
    r.error = strcmp(err, "-") == 0 ? "" : err;
    r.message = line + used;
    while (!r.message.empty() && (r.message.back() == '\n' || r.message.back() == ' ')) r.message.pop_back();
    (*all)[at] = r;
    ++n;
  }
  fclose(f);
  remove(path.c_str());
  return n;
}

// A worker: its devices (those at place k, k + shards, ... of the share) in threads, its results to its shard file.
// Never returns.
[[noreturn]] void worker(const FleetPlan& p, uint32_t shards, uint32_t k) {
  const std::vector<uint32_t>& share = p.options->share;
  std::vector<uint32_t> mine;
  for (size_t at = k; at < share.size(); at += shards) mine.push_back(share[at]);
  std::vector<DeviceResult> rs;
  const int signo = run_devices(p, mine, &rs);
  const bool ok = write_shard(shard_path(p, k), rs, p.keylog != nullptr && p.keylog->failed());
  _exit(!ok ? 3 : signo != 0 ? 130 : 0);
}

// Waits for the workers, forwarding a SIGINT/SIGTERM to them; their CPU and peak RSS into stats.
int wait_workers(const std::vector<pid_t>& pids, ProcStats* stats, std::vector<int>* status) {
  int signo = 0;
  size_t alive = pids.size();
  while (alive > 0) {
    const int s = wait_signal_until(mono_now_us() + 50000);
    if (s != 0 && signo == 0) {
      signo = s;
      for (pid_t pid : pids) kill(pid, s);
    }
    while (true) {
      int st = 0;
      rusage ru;
      const pid_t pid = wait4(-1, &st, WNOHANG, &ru);
      if (pid <= 0) break;
      for (size_t k = 0; k < pids.size(); ++k) {
        if (pids[k] == pid) (*status)[k] = st;
      }
      stats->user_s += seconds(ru.ru_utime);
      stats->sys_s += seconds(ru.ru_stime);
      stats->max_rss_kb += ru.ru_maxrss;
      --alive;
    }
  }
  return signo;
}

void worker_lost(const FleetPlan& p, uint32_t shards, uint32_t k, int status, std::vector<DeviceResult>* out) {
  char why[64];
  if (WIFSIGNALED(status)) {
    snprintf(why, sizeof(why), "ended by signal %d", WTERMSIG(status));
  } else {
    snprintf(why, sizeof(why), "exited %d", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  }
  const std::vector<uint32_t>& share = p.options->share;
  for (size_t at = k; at < share.size(); at += shards) {
    DeviceResult& r = (*out)[at];
    if (r.t_start_us >= 0 || !r.error.empty()) continue;  // reported
    r.index = share[at];
    r.error = tb::err_name(tb::Err::SendLog);
    r.message = "worker process " + std::to_string(k) + " " + why + " without reporting this device";
  }
}

int run_workers(const FleetPlan& p, uint32_t shards, std::vector<DeviceResult>* out, ProcStats* stats,
                bool* keylog_failed) {
  fflush(stdout);
  fflush(stderr);
  std::vector<pid_t> pids;
  for (uint32_t k = 0; k < shards; ++k) {
    const pid_t pid = fork();
    if (pid == 0) worker(p, shards, k);
    if (pid < 0) {
      perror("fleet: fork");
      break;
    }
    pids.push_back(pid);
  }
  out->assign(p.options->share.size(), DeviceResult());
  std::vector<int> status(pids.size(), 0);
  int signo = wait_workers(pids, stats, &status);
  for (uint32_t k = 0; k < shards; ++k) {
    read_shard(shard_path(p, k), p.options->share, out, keylog_failed);
    worker_lost(p, shards, k, k < status.size() ? status[k] : 0, out);
  }
  return signo;
}

}  // namespace

long count_open_fds() {
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return 3;
  long n = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n - 1;  // the directory's own descriptor
}

uint32_t devices_per_process(long open_fds) {
  const long n = static_cast<long>(FD_SETSIZE) - open_fds - kFdReserve;
  return n < 1 ? 1 : static_cast<uint32_t>(n);
}

bool ensure_limits(const std::string& what, uint32_t devices, uint32_t per_process, long open_fds,
                   std::string* error) {
  const rlim_t need = static_cast<rlim_t>(per_process) + static_cast<rlim_t>(open_fds + kFdReserve);
  const rlim_t have = raise_soft(RLIMIT_NOFILE, need);
  if (have != RLIM_INFINITY && have < need) {
    *error = what + " needs about " + std::to_string(need) +
             " file descriptors; the limit is " + std::to_string(have) + " (ulimit -n)";
    return false;
  }
  const rlim_t threads = static_cast<rlim_t>(devices) + 64;  // RLIMIT_NPROC counts the user's threads
  const rlim_t nproc = raise_soft(RLIMIT_NPROC, threads);
  if (nproc != RLIM_INFINITY && nproc < threads) {
    *error = what + " needs about " + std::to_string(threads) +
             " threads; the limit is " + std::to_string(nproc) + " (ulimit -u)";
    return false;
  }
  return true;
}

ProcStats self_stats() {
  rusage ru;
  memset(&ru, 0, sizeof(ru));
  getrusage(RUSAGE_SELF, &ru);
  ProcStats s;
  s.user_s = seconds(ru.ru_utime);
  s.sys_s = seconds(ru.ru_stime);
  const long hwm = vm_hwm_kb();
  s.max_rss_kb = hwm >= 0 ? hwm : ru.ru_maxrss;
  return s;
}

int run_fleet(const FleetPlan& p, uint32_t shards, std::vector<DeviceResult>* out, ProcStats* stats,
              bool* keylog_failed) {
  *keylog_failed = false;
  if (shards <= 1) {
    const int signo = run_devices(p, p.options->share, out);
    *stats = self_stats();
    *keylog_failed = p.keylog != nullptr && p.keylog->failed();
    return signo;
  }
  ProcStats workers;
  workers.processes = 0;
  const int signo = run_workers(p, shards, out, &workers, keylog_failed);
  *stats = self_stats();
  stats->user_s += workers.user_s;
  stats->sys_s += workers.sys_s;
  stats->max_rss_kb += workers.max_rss_kb;
  stats->processes = 1 + static_cast<int>(shards);
  return signo;
}

}  // namespace fleet
