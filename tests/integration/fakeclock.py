"""One lab host's wall clock made wrong for every process run there over SSH (issue 40's acceptance): libfaketime.

``open_lab(folder, faketime={"publisher3": "+0.35 x1.00004"})`` (tests/integration/labhosts.py) gives that host a
clock ``spec`` s ahead (libfaketime's FAKETIME: an offset, then ``x`` and the rate its clock runs at against the
real one): tests only, nothing of the product knows of it. How it reaches every process of ours there:

- a holder process (``sleep infinity`` under libfaketime) started with ``docker exec`` before anyone logs in makes
  libfaketime's shared memory (/dev/shm/faketime_shm_<pid>) and sets in it the one start instant every process of
  the host measures the rate from: without it each process would run its rate from its OWN start, and the host would
  have as many clocks as processes (libfaketime's README: "x" restarts with each process);
- /etc/environment names the library, the FAKETIME spec, FAKETIME_DONT_FAKE_MONOTONIC=1 (the monotonic clock stays
  the kernel's: only the wall clock is wrong) and FAKETIME_SHARED (the holder's objects); sshd's PAM session
  (pam_env, Debian's /etc/pam.d/sshd) puts them into every session, so every command Ansible runs there, and all
  that it starts, has them. The file is written before the first SSH connection (a connection keeps the
  environment of its first session);
- tests/integration/faketime_monotonic.c, preloaded first: Debian 12's libfaketime 0.9.10 fails absolute monotonic
  sleeps under FAKETIME_DONT_FAKE_MONOTONIC=1 (EINVAL: Python's time.sleep raises, the fleet does not wait); 0.9.11
  fixed it upstream, and the shim does what the fix does.

The truth a test checks the bundle against: at real time t (epoch, the kernel's CLOCK_REALTIME, which every host of
the lab shares) the host reads ``s + offset + (t - s) x rate`` with s the holder's start (``start_us``, read just
before it started: a few ms early, which moves the truth by a few ms x the rate's difference from 1, well under
a microsecond at tens of ppm).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SHIM_SOURCE = Path(__file__).with_name("faketime_monotonic.c")
SHIM_ON_HOST = "/usr/local/lib/testbed_faketime_monotonic.so"
SPEC = re.compile(r"^([+-]\d+(?:\.\d+)?) x(\d+(?:\.\d+)?)$")  # the FAKETIME forms the truth below understands


@dataclass(frozen=True)
class FakeClock:
    """A host's clock as libfaketime makes it: host(t) = s + offset + (t - s) x rate (module docstring)."""

    spec: str
    offset_s: float
    rate: float
    start_us: int  # s: real epoch microseconds when the holder started
    holder_pid: int

    @classmethod
    def parse(cls, spec: str, start_us: int, holder_pid: int) -> FakeClock:
        m = SPEC.match(spec)
        if not m:
            raise ValueError(f"FAKETIME {spec!r}: give '+SECONDS xRATE' (e.g. '+0.35 x1.00004')")
        return cls(spec, float(m.group(1)), float(m.group(2)), start_us, holder_pid)

    @property
    def drift_ppm(self) -> float:
        """How much faster than the real clock the host's runs, in ppm of real time."""
        return (self.rate - 1) * 1e6

    def host_us(self, real_us: float) -> float:
        return self.start_us + self.offset_s * 1e6 + (real_us - self.start_us) * self.rate

    def real_us(self, host_us: float) -> float:
        return self.start_us + (host_us - self.start_us - self.offset_s * 1e6) / self.rate

    def lab_minus_host_us(self, host_us: float) -> float:
        """The true offset in the bundle's sense (analysis/clock.py: lab = host + offset) at host time ``host_us``."""
        return self.real_us(host_us) - host_us

    def environment(self, library: str) -> dict[str, str]:
        return {"LD_PRELOAD": f"{SHIM_ON_HOST} {library}", "FAKETIME": self.spec,
                "FAKETIME_DONT_FAKE_MONOTONIC": "1",
                "FAKETIME_SHARED": f"/faketime_sem_{self.holder_pid} /faketime_shm_{self.holder_pid}"}


def _exec(container: str, script: str, timeout: float = 60) -> str:
    proc = subprocess.run(["docker", "exec", container, "sh", "-c", script], capture_output=True, text=True,
                          timeout=timeout, check=False)
    if proc.returncode:
        raise RuntimeError(f"{container}: {script!r}: exit {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


def build_shim(folder: Path) -> Path:
    """faketime_monotonic.c built here (the lab hosts are the same Debian 12 as this machine)."""
    out = folder / "faketime_monotonic.so"
    if not out.exists():
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-Wall", "-o", str(out), str(SHIM_SOURCE), "-ldl"],
                       check=True, capture_output=True, timeout=120)
    return out


def fake_host_clock(container: str, spec: str, folder: Path) -> FakeClock:
    """Make ``container``'s wall clock ``spec`` for every SSH session from now on (module docstring)."""
    FakeClock.parse(spec, 0, 0)  # refuses a spec before anything is done
    subprocess.run(["docker", "cp", str(build_shim(folder)), f"{container}:{SHIM_ON_HOST}"], check=True,
                   capture_output=True, timeout=60)
    library = _exec(container, "ls /usr/lib/*/faketime/libfaketimeMT.so.1").strip()
    env = f"LD_PRELOAD={shlex.quote(f'{SHIM_ON_HOST} {library}')} FAKETIME={shlex.quote(spec)} " \
          "FAKETIME_DONT_FAKE_MONOTONIC=1"
    out = _exec(container, f"date +%s%N; {env} sleep infinity </dev/null >/dev/null 2>&1 & echo $!").split()
    clock = FakeClock.parse(spec, int(out[0]) // 1000, int(out[1]))
    deadline = time.monotonic() + 10
    while _exec(container, f"test -e /dev/shm/sem.faketime_sem_{clock.holder_pid} && echo yes || true").strip() \
            != "yes":
        if time.monotonic() > deadline:
            raise RuntimeError(f"{container}: libfaketime's holder made no shared memory")
        time.sleep(0.05)
    lines = "".join(f'{k}="{v}"\n' for k, v in clock.environment(library).items())
    _exec(container, f"printf %s {shlex.quote(lines)} >> /etc/environment")
    return clock


def check_session(ssh: Any, host: Any, clock: FakeClock) -> dict[str, Any]:
    """What an SSH session on the host (the path Ansible takes) sees: its environment, its wall clock against ours
    (the same kernel clock: the host's must read what ``clock`` says, within the session's start-up), and that an
    absolute monotonic sleep works there. Raises when the fake clock does not apply."""
    script = ("import os, time; t = time.time_ns() // 1000; time.sleep(0.01); "
              "env = open('/proc/self/environ').read().split(chr(0)); "
              "print(t); print(*[e for e in env if e.startswith(('FAKETIME', 'LD_PRELOAD'))], sep=chr(10))")
    before = time.time_ns() / 1000
    proc = ssh(host, "python3", "-c", script, timeout=60)
    after = time.time_ns() / 1000
    if proc.returncode:
        raise RuntimeError(f"the faked clock breaks a session on {host}: {proc.stderr.strip()}")
    lines = proc.stdout.split("\n")
    read = int(lines[0])
    env = dict(line.split("=", 1) for line in lines[1:] if "=" in line)
    if not clock.host_us(before) <= read <= clock.host_us(after) or env.get("FAKETIME") != clock.spec:
        raise RuntimeError(f"{host}: a session's clock reads {read}, not within [{clock.host_us(before):.0f}, "
                           f"{clock.host_us(after):.0f}] (FAKETIME {clock.spec}); its environment {env}")
    return {"read_us": read, "real_us": (before, after), "environment": env}
