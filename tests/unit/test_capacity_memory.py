"""Memory in a publisher host's capacity check (orchestrator/clients/capacity.py; issue 40 part 3): the share's
resident memory against MemAvailable and a memory cgroup's room, its address space per fleet process against
RLIMIT_AS, its committed memory when the kernel does not overcommit; each from the capacity bench's figures. The
cgroup is read from fake v1 and v2 trees here; the lab's refusal on a real host (a container's memory limit) is
tests/integration/test_lab_fleet.py's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.clients import capacity

ROOMY: dict[str, int | None] = {
    "cores": 2, "mem_available_kb": 64 << 20, "cgroup_memory_limit_kb": None, "cgroup_memory_room_kb": None,
    "address_space_limit_kb": None, "overcommit": 0, "commit_room_kb": 64 << 20, "nofile_hard": 1 << 20,
    "nproc_hard": 1 << 20, "uid": 1000, "ephemeral_ports": 28232}



def figures() -> tuple[capacity.MemoryCost, capacity.MemoryCost, capacity.MemoryCost]:
    """A plain device's, a TLS device's and a fleet process's memory (capacity.FLEET_MEMORY, FLEET_PROCESS)."""
    return capacity.FLEET_MEMORY["plain"], capacity.FLEET_MEMORY["tls"], capacity.FLEET_PROCESS


def test_a_share_far_beyond_the_hosts_memory_is_refused() -> None:
    """A thousand devices cannot live in 1 MB, in MemAvailable or in a container's memory cgroup."""
    short = capacity.problems("p3", 1000, {**ROOMY, "mem_available_kb": 1000})
    assert any(ln.startswith("p3: its share of 1000 devices needs ") and "MemAvailable is 1000 kB" in ln
               and "publisher_weight" in ln for ln in short), short
    limited = capacity.problems("p3", 1000, {**ROOMY, "cgroup_memory_limit_kb": 2000, "cgroup_memory_room_kb": 1000})
    assert any("its memory cgroup (limit 2000 kB) has 1000 kB left" in ln for ln in limited), limited


def test_the_figures_are_the_benchs_and_a_tls_device_holds_more() -> None:
    PLAIN, TLS, FIXED = figures()
    assert "bench/fleet_capacity.py" in capacity.FIGURES_FROM and Path(capacity.FIGURES_FROM.split()[1]).is_file()
    assert TLS.resident_kb > PLAIN.resident_kb > 0 and PLAIN.address_kb >= 256  # a thread's 256 KiB stack at least
    assert FIXED.resident_kb > 0 and FIXED.address_kb > FIXED.resident_kb


def test_what_a_share_needs_of_memory() -> None:
    PLAIN, TLS, FIXED = figures()
    one = capacity.needs(300, "tls")  # one fleet process
    assert one["processes"] == 1 and one["per_process"] == 300
    assert one["resident_kb"] == 300 * TLS.resident_kb + FIXED.resident_kb
    assert one["address_kb"] == 300 * TLS.address_kb + FIXED.address_kb + 7 * capacity.ARENA_KB  # 8 arenas a core
    assert capacity.needs(300, "tls", cores=2)["address_kb"] == one["address_kb"] + 8 * capacity.ARENA_KB
    assert capacity.needs(3, "tls", cores=2)["address_kb"] == 3 * TLS.address_kb + FIXED.address_kb + 3 * (64 << 10)
    assert one["commit_kb"] == 300 * TLS.address_kb + FIXED.resident_kb
    two = capacity.needs(2000)  # two workers of 1000 devices, forked by a parent that runs none
    assert two["processes"] == 3 and two["per_process"] == 1000
    assert two["resident_kb"] == 2000 * PLAIN.resident_kb + 3 * FIXED.resident_kb
    assert two["address_kb"] == 1000 * PLAIN.address_kb + FIXED.address_kb + 7 * capacity.ARENA_KB  # per process
    # the bench's run of 300 plain devices on 2 cores printed 3562 kB of address space per device (0.5 kB rounding)
    assert capacity.needs(300, "plain", cores=2)["address_kb"] == pytest.approx(300 * 3562, abs=150)


def test_a_share_that_does_not_fit_in_memavailable_is_refused_naming_the_host_the_figures_and_the_hint() -> None:
    PLAIN, TLS, FIXED = figures()
    need = 1000 * PLAIN.resident_kb + FIXED.resident_kb
    assert capacity.problems("p3", 1000, {**ROOMY, "mem_available_kb": need}) == []
    [line] = capacity.problems("p3", 1000, {**ROOMY, "mem_available_kb": need - 1})
    assert line.startswith(f"p3: its share of 1000 devices needs {need} kB of memory (1000 plain devices x "
                           f"{PLAIN.resident_kb} kB resident + 1 fleet process(es) x {FIXED.resident_kb} kB, from "
                           f"`{capacity.FIGURES_FROM}`); MemAvailable is {need - 1} kB")
    assert line.endswith("give the host a smaller publisher_weight or add publisher hosts")
    [tls] = capacity.problems("p3", 1000, {**ROOMY, "mem_available_kb": need}, "tls")  # what fits plain does not
    assert f"1000 tls devices x {TLS.resident_kb} kB" in tls


def test_a_containers_memory_limit_counts_when_memavailable_is_the_machines() -> None:
    need = capacity.needs(500, "tls")["resident_kb"]
    have = {**ROOMY, "cgroup_memory_limit_kb": 96 << 10, "cgroup_memory_room_kb": need // 2}
    [line] = capacity.problems("pub3", 500, have, "tls")
    assert line.startswith(f"pub3: its share of 500 devices needs {need} kB of memory")
    assert f"its memory cgroup (limit {96 << 10} kB) has {need // 2} kB left: raise the limit" in line
    assert "publisher_weight" in line
    assert capacity.problems("pub3", 500, {**have, "cgroup_memory_room_kb": need}, "tls") == []


def test_address_space_is_checked_per_fleet_process_against_rlimit_as() -> None:
    PLAIN, TLS, FIXED = figures()
    per_process = 1000 * PLAIN.address_kb + FIXED.address_kb + 15 * capacity.ARENA_KB  # ROOMY has 2 cores
    assert capacity.problems("p", 2000, {**ROOMY, "address_space_limit_kb": per_process}) == []  # 2 x 1000 devices
    [line] = capacity.problems("p", 2000, {**ROOMY, "address_space_limit_kb": per_process - 1})
    assert f"needs {per_process} kB of address space per fleet process (1000 devices x {PLAIN.address_kb} kB" in line
    assert f"RLIMIT_AS is {per_process - 1} kB: raise it" in line


def test_committed_memory_counts_only_when_the_kernel_does_not_overcommit() -> None:
    need = capacity.needs(800, "tls")["commit_kb"]
    short = {**ROOMY, "commit_room_kb": need - 1}
    assert capacity.problems("p", 800, short, "tls") == []  # heuristic overcommit: a stack is never refused
    [line] = capacity.problems("p", 800, {**short, "overcommit": 2}, "tls")
    assert f"needs {need} kB of committed memory" in line and f"is {need - 1} kB" in line


def _v1(tmp_path: Path, limits: dict[str, tuple[int, int, int]], own: str) -> tuple[Path, Path]:
    """A cgroup v1 memory hierarchy: folder -> (limit, usage, total_inactive_file) in bytes."""
    root = tmp_path / "cg"
    for folder, (limit, usage, inactive) in limits.items():
        d = root / "memory" / folder
        d.mkdir(parents=True, exist_ok=True)
        (d / "memory.limit_in_bytes").write_text(f"{limit}\n")
        (d / "memory.usage_in_bytes").write_text(f"{usage}\n")
        (d / "memory.stat").write_text(f"cache 1\ninactive_file 0\ntotal_inactive_file {inactive}\n")
    (tmp_path / "self").write_text(f"5:cpu,cpuacct:/\n4:memory:/{own}\n0::/\n")
    return root, tmp_path / "self"


def test_the_tightest_cgroup_v1_limit_over_the_cgroup_and_its_ancestors(tmp_path: Path) -> None:
    unlimited = 9223372036854771712
    root, own = _v1(tmp_path, {"": (unlimited, 5 << 30, 0), "lab": (1 << 30, 900 << 20, 0),
                               "lab/pub3": (unlimited, 100 << 20, 0)}, "lab/pub3")
    assert capacity.cgroup_memory(root, own) == (1 << 20, 124 << 10)  # the parent's limit, its room
    root, own = _v1(tmp_path / "b", {"": (96 << 20, 40 << 20, 10 << 20)}, "docker/0123abcd")  # in a container
    assert capacity.cgroup_memory(root, own) == (96 << 10, 66 << 10)  # the inactive page cache is room
    root, own = _v1(tmp_path / "c", {"": (unlimited, 5 << 30, 0)}, "")
    assert capacity.cgroup_memory(root, own) == (None, None)


def test_a_cgroup_v2_limit_and_no_cgroup_at_all(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    d = root / "system.slice" / "pub.scope"
    d.mkdir(parents=True)
    (root / "system.slice" / "memory.max").write_text("max\n")
    (root / "system.slice" / "memory.current").write_text(f"{1 << 30}\n")
    (d / "memory.max").write_text(f"{256 << 20}\n")
    (d / "memory.current").write_text(f"{200 << 20}\n")
    (d / "memory.stat").write_text(f"anon 1\ninactive_file {8 << 20}\n")
    (tmp_path / "self").write_text("0::/system.slice/pub.scope\n")
    assert capacity.cgroup_memory(root, tmp_path / "self") == (256 << 10, 64 << 10)
    assert capacity.cgroup_memory(root, tmp_path / "missing") == (None, None)


def test_the_host_reports_its_memory_and_main_refuses_with_one_line_per_limit(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    PLAIN, TLS, FIXED = figures()
    here = capacity.host_limits()
    assert here["mem_available_kb"] and here["overcommit"] in (0, 1, 2) and here["commit_room_kb"] is not None
    monkeypatch.setattr(capacity, "host_limits", lambda: {**ROOMY, "mem_available_kb": 1000, "nofile_hard": 64})
    assert capacity.main(["--host", "pub3", "--devices", "100", "--transport", "tls"]) == 1
    out, err = capsys.readouterr()
    assert "mem_available_kb=1000\n" in out and "cgroup_memory_limit_kb=\n" in out
    lines = err.splitlines()
    assert len(lines) == 2 and all(ln.startswith("pub3: its share of 100 devices needs ") for ln in lines)
    assert "RLIMIT_NOFILE" in lines[0] and f"{100 * TLS.resident_kb + FIXED.resident_kb} kB of memory" in lines[1]
