"""The testbed's processes on a lab host without Docker: start, wait for, stop, with pidfiles (docs/multi-host.md).

playbooks/lab.yml copies this module (with time_echo and clock_probe) into the lab folder of each host and runs
it with the host's python3; everything it makes lives in that folder (``--dir``):

    procs/<name>.pid   the process's pid (written once it runs)
    procs/<name>.sup   its supervisor's pid: a small python process that waits for it and writes
    procs/<name>.rc    its exit code (negative: killed by that signal; 127: it could not be started)
    procs/<name>.log   its stdout and stderr

    python3 -m orchestrator.clients.labhost --dir D start --name broker [--env K=V] -- mosquitto -c FILE
    python3 -m orchestrator.clients.labhost --dir D ready --timeout 30 --listen 8883 --alive broker
    python3 -m orchestrator.clients.labhost --dir D wait --name publisher --timeout 45
    python3 -m orchestrator.clients.labhost --dir D stop --name capture --signal INT --timeout 20
    python3 -m orchestrator.clients.labhost --dir D stop-all
    python3 -m orchestrator.clients.labhost --dir D finish --stop capture:INT:20 --stop broker:TERM:10 \
        --pack collect.tgz run/capture run/logs procs

(the lab folder's bin/labhost runs it with --dir set and the folder's own copy of our modules)

A process is signalled by its own pid (never a name); the supervisor ignores the signals it may get (its child
gets them with their default action, as handlers do not survive exec). ``wait`` and ``ready`` give up as soon
as the folder is gone (the lab was taken down from elsewhere), so no waiting process of ours outlives it.
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

POLL_S = 0.05
EXIT_TIMEOUT, EXIT_GONE, EXIT_FAILED = 3, 4, 5


def procs(folder: Path) -> Path:
    return folder / "procs"


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def alive(pid: int | None) -> bool:
    """The process exists and is not a zombie."""
    if pid is None or pid <= 0:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def exit_code(folder: Path, name: str) -> int | None:
    return _read_int(procs(folder) / f"{name}.rc")


def supervise(folder: Path, name: str, argv: list[str], env: dict[str, str]) -> int:
    """Run ``argv`` with its output in procs/<name>.log; pidfile when it runs, exit code when it ends."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda _s, _f: None)  # a handler, not SIG_IGN: the child gets the default action
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:  # a fleet's connections: one descriptor each, in the broker and in the fleet
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    d = procs(folder)
    with (d / f"{name}.log").open("ab") as log:
        try:
            child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **env}, close_fds=True)
        except OSError as exc:
            log.write(f"labhost: cannot start {argv[0]}: {exc}\n".encode())
            _write(d / f"{name}.rc", "127\n")
            return 127
        _write(d / f"{name}.pid", f"{child.pid}\n")
        rc = child.wait()
    _write(d / f"{name}.rc", f"{rc}\n")
    return 0


def redacted(argv: list[str]) -> list[str]:
    """The command line for the record: the value of a ``--password`` left out."""
    return [("***" if i and argv[i - 1] == "--password" else a) for i, a in enumerate(argv)]


def start_supervised(folder: Path, name: str, argv: list[str], env: dict[str, str], timeout_s: float = 10.0) -> int:
    """Start ``argv`` under a supervisor in a session of its own; return once it runs (its pid printed)."""
    d = procs(folder)
    d.mkdir(parents=True, exist_ok=True)
    if alive(_read_int(d / f"{name}.pid")) and exit_code(folder, name) is None:
        print(f"labhost: {name} is already running", file=sys.stderr)
        return EXIT_FAILED
    for suffix in ("pid", "rc", "sup"):
        (d / f"{name}.{suffix}").unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "orchestrator.clients.labhost", "--dir", str(folder), "supervise", "--name", name,
           *(f"--env={k}={v}" for k, v in env.items()), "--", *argv]
    sup = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True, close_fds=True, env=os.environ.copy())
    _write(d / f"{name}.sup", f"{sup.pid}\n")
    _write(d / f"{name}.argv", json.dumps(redacted(argv)) + "\n")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pid, rc = _read_int(d / f"{name}.pid"), exit_code(folder, name)
        if rc == 127 or (pid is None and rc is not None):
            print(f"labhost: {name} could not be started: {tail(folder, name)}", file=sys.stderr)
            return EXIT_FAILED
        if pid is not None:
            print(f"{name} pid {pid}")
            return 0
        time.sleep(POLL_S)
    print(f"labhost: {name} did not start within {timeout_s:g} s", file=sys.stderr)
    return EXIT_TIMEOUT


def tail(folder: Path, name: str, lines: int = 3) -> str:
    try:
        text = (procs(folder) / f"{name}.log").read_text(errors="replace")
    except OSError:
        return "(no log)"
    return " | ".join(ln.strip() for ln in text.strip().splitlines()[-lines:]) or "(empty log)"


def wait(folder: Path, name: str, timeout_s: float) -> int:
    """Until the process ended (its exit code printed), the timeout, or the folder is gone."""
    deadline = time.monotonic() + timeout_s
    while True:
        rc = exit_code(folder, name)
        if rc is not None:
            print(f"{name} exit {rc}")
            return 0
        if not folder.is_dir():
            print(f"labhost: {folder} is gone", file=sys.stderr)
            return EXIT_GONE
        if not alive(_read_int(procs(folder) / f"{name}.sup")):
            print(f"labhost: the supervisor of {name} is gone, no exit code", file=sys.stderr)
            return EXIT_FAILED
        if time.monotonic() > deadline:
            print(f"labhost: {name} still running after {timeout_s:g} s", file=sys.stderr)
            return EXIT_TIMEOUT
        time.sleep(POLL_S)


def _signal_and_wait(pid: int, sig: int, grace_s: float) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(POLL_S)


def stop(folder: Path, name: str, sig: int = signal.SIGTERM, timeout_s: float = 10.0) -> int:
    """Signal the process (by its pid) and wait for it; SIGKILL after ``timeout_s``. 0 also when not running."""
    d = procs(folder)
    pid = _read_int(d / f"{name}.pid")
    if pid is not None:
        for step, grace in ((sig, timeout_s), (signal.SIGKILL, 5.0)):
            if not alive(pid) or exit_code(folder, name) is not None:
                break
            _signal_and_wait(pid, step, grace)
    sup = _read_int(d / f"{name}.sup")
    deadline = time.monotonic() + 5.0
    while sup is not None and alive(sup) and time.monotonic() < deadline:  # it writes the exit code, then ends
        time.sleep(POLL_S)
    if sup is not None and alive(sup):
        _signal_and_wait(sup, signal.SIGKILL, 5.0)
    if pid is not None and alive(pid):
        print(f"labhost: {name} (pid {pid}) survived SIGKILL", file=sys.stderr)
        return EXIT_FAILED
    print(f"{name} stopped, exit {exit_code(folder, name)}")
    return 0


def stop_all(folder: Path, timeout_s: float = 10.0) -> int:
    """Stop every process that has a pidfile here (SIGTERM, then SIGKILL)."""
    d = procs(folder)
    names = sorted({p.stem for p in d.glob("*.sup")} | {p.stem for p in d.glob("*.pid")}) if d.is_dir() else []
    return max([stop(folder, n, signal.SIGTERM, timeout_s) for n in names], default=0)


def finish(folder: Path, stops: list[str], archive: str | None, paths: list[str]) -> int:
    """Stop processes in order (``NAME:SIGNAL:TIMEOUT``), then pack ``paths`` of the folder (those that exist)
    into ``archive``; every step is taken whatever the one before did."""
    rc = 0
    for item in stops:
        name, sig, timeout = (item.split(":") + ["TERM", "10"])[:3]
        rc = max(rc, stop(folder, name, getattr(signal, f"SIG{sig.upper().removeprefix('SIG')}"), float(timeout)))
    if archive:  # 0600: it holds the capture (a plain CONNECT's password) and the key logs
        fd = os.open(folder / archive, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
            for rel in paths:
                if (folder / rel).exists():
                    tar.add(folder / rel, arcname=rel)
    return rc


def listening(port: int, proc: Path = Path("/proc/net")) -> bool:
    """A TCP socket listens on ``port`` (state 0A in /proc/net/tcp or tcp6)."""
    want = f":{port:04X}"
    for name in ("tcp", "tcp6"):
        try:
            lines = (proc / name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[1].endswith(want) and fields[3] == "0A":
                return True
    return False


def _json_state(path: Path) -> dict[str, object]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def problem(folder: Path, args: argparse.Namespace) -> str | None:
    """Why the awaited state will never come: a process ended, the status file names an error."""
    for name in args.alive or []:
        rc = exit_code(folder, name)
        if rc is not None:
            return f"{name} exited ({rc}): {tail(folder, name)}"
    if args.json_true and _json_state(Path(args.json_true[0])).get("error"):
        return f"{args.json_true[0]}: {_json_state(Path(args.json_true[0]))['error']}"
    return None


def reached(args: argparse.Namespace) -> bool:
    if args.listen is not None and not listening(args.listen):
        return False
    if args.nonempty and not all(Path(p).is_file() and Path(p).stat().st_size > 0 for p in args.nonempty):
        return False
    if args.json_true and not _json_state(Path(args.json_true[0])).get(args.json_true[1]):
        return False
    if args.lines:
        path, wanted = Path(args.lines[0]), int(args.lines[1])
        try:
            return path.read_bytes().count(b"\n") - 1 >= wanted
        except OSError:
            return False
    return True


def ready(folder: Path, args: argparse.Namespace) -> int:
    """Until every condition holds; fails at once when one never will, or the folder is gone."""
    deadline = time.monotonic() + args.timeout
    while True:
        why = problem(folder, args)
        if why:
            print(f"labhost: {why}", file=sys.stderr)
            return EXIT_FAILED
        if reached(args):
            print("ready")
            return 0
        if not folder.is_dir():
            print(f"labhost: {folder} is gone", file=sys.stderr)
            return EXIT_GONE
        if time.monotonic() > deadline:
            print(f"labhost: not ready within {args.timeout:g} s", file=sys.stderr)
            return EXIT_TIMEOUT
        time.sleep(POLL_S)


def interface_of(address: str) -> str | None:
    """The interface holding ``address`` (``ip -o addr``)."""
    out = subprocess.run(["ip", "-o", "addr", "show"], capture_output=True, text=True, check=False).stdout
    for line in out.splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[3].split("/")[0] == address:
            return fields[1].split("@")[0]
    return None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="labhost", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", type=Path, help="the lab folder (required but for iface)")
    sub = p.add_subparsers(dest="command", required=True)
    for command in ("start", "supervise"):
        s = sub.add_parser(command)
        s.add_argument("--name", required=True)
        s.add_argument("--env", action="append", default=[], help="K=V for the process")
        s.add_argument("--wait", type=float, help="start: then wait up to this long for it to end")
        s.add_argument("argv", nargs="+")
    s = sub.add_parser("wait")
    s.add_argument("--name", required=True)
    s.add_argument("--timeout", type=float, required=True)
    s = sub.add_parser("stop")
    s.add_argument("--name", required=True)
    s.add_argument("--signal", default="TERM", help="INT, TERM, ...")
    s.add_argument("--timeout", type=float, default=10.0)
    s = sub.add_parser("finish")
    s.add_argument("--stop", action="append", default=[], help="NAME:SIGNAL:TIMEOUT, in order")
    s.add_argument("--pack", help="archive (in the folder) of the paths that exist")
    s.add_argument("paths", nargs="*")
    s = sub.add_parser("stop-all")
    s.add_argument("--timeout", type=float, default=10.0)
    s = sub.add_parser("ready")
    s.add_argument("--timeout", type=float, required=True)
    s.add_argument("--listen", type=int, help="a TCP port something listens on")
    s.add_argument("--nonempty", action="append", help="a file that exists and is not empty")
    s.add_argument("--json-true", nargs=2, metavar=("FILE", "KEY"), help="FILE's KEY is true (its error fails)")
    s.add_argument("--lines", nargs=2, metavar=("CSV", "N"), help="CSV has N data lines")
    s.add_argument("--alive", action="append", help="a process that must not end meanwhile")
    s = sub.add_parser("iface")
    s.add_argument("address")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "iface":
        found = interface_of(args.address)
        print(found or f"labhost: no interface holds {args.address}", file=sys.stdout if found else sys.stderr)
        return 0 if found else EXIT_FAILED
    if args.dir is None:
        print("labhost: --dir is required", file=sys.stderr)
        return 2
    folder = args.dir.resolve()
    if args.command == "supervise":
        return supervise(folder, args.name, args.argv, dict(e.split("=", 1) for e in args.env))
    if args.command == "start":
        rc = start_supervised(folder, args.name, args.argv, dict(e.split("=", 1) for e in args.env))
        return rc if rc or args.wait is None else wait(folder, args.name, args.wait)
    if args.command == "finish":
        return finish(folder, args.stop, args.pack, args.paths)
    if args.command == "wait":
        return wait(folder, args.name, args.timeout)
    if args.command == "stop":
        return stop(folder, args.name, getattr(signal, f"SIG{args.signal.upper().removeprefix('SIG')}"), args.timeout)
    if args.command == "stop-all":
        return stop_all(folder, args.timeout)
    return ready(folder, args)


if __name__ == "__main__":
    sys.exit(main())
