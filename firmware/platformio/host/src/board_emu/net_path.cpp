#include "net_path.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstring>

namespace vdev {

PathDirection::PathDirection(uint32_t delay_us, uint32_t jitter_us, uint64_t seed)
    : delay_us_(delay_us), jitter_us_(jitter_us), rng_(seed) {}

int64_t PathDirection::release_at(int64_t now_mono_us) {
  uint64_t jitter = 0;
  if (jitter_us_ != 0) jitter = rng_() % (static_cast<uint64_t>(jitter_us_) + 1);  // bias < 2^-40
  int64_t release = now_mono_us + static_cast<int64_t>(delay_us_) + static_cast<int64_t>(jitter);
  if (release < last_release_) release = last_release_;  // FIFO: never before the previous packet
  last_release_ = release;
  return release;
}

NetPath::NetPath(uint32_t up_us, uint32_t up_jitter_us, uint32_t down_us, uint32_t down_jitter_us, uint64_t seed)
    : up(up_us, up_jitter_us, seed ^ 0xA5A5F00DCAFE0001ULL), down(down_us, down_jitter_us, seed ^ 0x5A5AD00DBEEF0002ULL) {}

namespace {

// false: a signal cut the sleep short.
bool sleep_precisely(tb::Clock& host, int64_t t) {
  if (t - kSpinUs > host.mono_us()) {
    host.sleep_until_mono_us(t - kSpinUs);
    if (host.mono_us() < t - kSpinUs) return false;
  }
  while (host.mono_us() < t) {
  }
  return true;
}

}  // namespace

void sleep_serving(tb::Clock& host, TimedWork* work, int64_t until_mono_us, bool precise_end) {
  while (work != nullptr) {
    const int64_t due = work->next_due_mono_us();
    if (due > until_mono_us) break;
    if (!sleep_precisely(host, due)) return;
    work->run_due();
  }
  if (precise_end) {
    sleep_precisely(host, until_mono_us);
  } else {
    host.sleep_until_mono_us(until_mono_us);
  }
}

TruthLog::~TruthLog() {
  if (f_ != nullptr) fclose(f_);
}

bool TruthLog::open(const std::string& path, const std::string& comment, std::string* error) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || fchmod(fd, 0600) != 0) {
    *error = "--truth-log " + path + ": " + strerror(errno);
    if (fd >= 0) ::close(fd);
    return false;
  }
  f_ = fdopen(fd, "w");
  if (f_ == nullptr) {
    *error = "--truth-log " + path + ": " + strerror(errno);
    ::close(fd);
    return false;
  }
  fprintf(f_, "# %s\nkind,seq,true_us,board_us\n", comment.c_str());
  fflush(f_);
  return true;
}

void TruthLog::row(const char* kind, uint32_t seq, int64_t true_us, int64_t board_us) {
  if (f_ == nullptr) return;
  fprintf(f_, "%s,%" PRIu32 ",%" PRId64 ",%" PRId64 "\n", kind, seq, true_us, board_us);
  fflush(f_);
}

}  // namespace vdev
