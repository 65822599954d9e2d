/* Preloaded before libfaketime on a lab host whose wall clock a test makes wrong (tests/integration/labhosts.py,
 * open_lab's ``faketime``): Debian 12's libfaketime 0.9.10 ignores FAKETIME_DONT_FAKE_MONOTONIC=1 in
 * clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, ...): it maps the (real) monotonic deadline as if it were a faked
 * one and sleeps until a time that is not there, so the call fails with EINVAL at once (Python's time.sleep raises,
 * the fleet's sleep_until returns without sleeping). libfaketime 0.9.11 leaves such a deadline untouched
 * (upstream commits d17bb11 and f262b5f, its issue 426); so does this: the monotonic clock is not faked, so the
 * deadline goes to the kernel as given. Every other call goes on to libfaketime. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef int (*sleep_fn)(clockid_t, int, const struct timespec *, struct timespec *);

int clock_nanosleep(clockid_t clock_id, int flags, const struct timespec *req, struct timespec *rem) {
  static sleep_fn next;
  if (clock_id == CLOCK_MONOTONIC && (flags & TIMER_ABSTIME)) {
    return syscall(SYS_clock_nanosleep, clock_id, flags, req, rem) == 0 ? 0 : errno;
  }
  if (next == NULL) next = (sleep_fn)dlsym(RTLD_NEXT, "clock_nanosleep");
  return next(clock_id, flags, req, rem);
}
