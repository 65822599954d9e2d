"""The fault suite's tools: what of ours is left on this machine, a finished cell's checksums, and the closing table.

Every case (tests/faults/test_faults.py) runs a tiny sweep as the unprivileged docker-group user (the session's
docker_user, tests/conftest.py); the faults are injected as root. At the end of the session the table of what
each case did and saw is printed (fault, how injected, what the user saw, what was left, resume result).
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from orchestrator.backends.impairment.argv import NFT_TABLE, OUR_HANDLES
from tests.integration.conftest import owned
from tests.integration.docker_user import DockerUser
from tests.integration.labhosts import Lab, open_lab, require_image

ROWS: list[dict[str, str]] = []  # one per case, in the order they ran
COLUMNS = ("fault", "how injected", "what the user saw", "what was left", "resume")


def impairment_here() -> list[str]:
    """Our nft table, our qdiscs and any NFQUEUE rule on this host (the delay line's live in its helper's
    namespace and go with it; one here would be ours too)."""
    tables = _out(["nft", "list", "tables"])
    ruleset = _out(["nft", "list", "ruleset"])
    qdiscs = _out(["tc", "qdisc", "show"])
    ipt = "".join(_out([tool]) for tool in ("iptables-save", "iptables-legacy-save") if shutil.which(tool))
    return ([f"nft {t}" for t in tables.splitlines() if NFT_TABLE in t]
            + [f"nft rule {r.strip()}" for r in ruleset.splitlines() if " queue " in f" {r} "]
            + [f"iptables {r}" for r in ipt.splitlines() if "NFQUEUE" in r]
            + [f"qdisc {q}" for q in qdiscs.splitlines() if any(f" {h}" in q for h in OUR_HANDLES)])


def _out(argv: list[str]) -> str:
    """What a leftover probe prints. A probe that cannot answer (the tool missing, failing or hanging) fails the
    test: its empty output would pass "nothing left" without anything having been looked at."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.fail(f"the leftover probe `{shlex.join(argv)}` could not run: {exc}", pytrace=False)
    if proc.returncode != 0:
        pytest.fail(f"the leftover probe `{shlex.join(argv)}` failed (exit {proc.returncode}): "
                    f"{proc.stderr.strip()[:300]}", pytrace=False)
    return proc.stdout


def processes_of(uid: int, spared: Iterable[int] = ()) -> list[str]:
    """The processes ``uid`` runs, but for ``spared`` ones and their descendants (a board emulator the case
    started for the user)."""
    rows = [(line.split(None, 3) + ["", "", ""])[:4] for line in _out(["ps", "-e", "-o", "pid=,ppid=,uid=,args="])
            .splitlines()]
    parent = {int(r[0]): int(r[1]) for r in rows}
    keep = set(spared)

    def is_spared(pid: int) -> bool:
        while pid > 1:
            if pid in keep:
                return True
            pid = parent.get(pid, 1)
        return False

    return [f"process {pid} {args[:120]}" for pid, _ppid, puid, args in rows
            if int(puid) == uid and not is_spared(int(pid))]


def ours_left(uid: int, out: Path, *, before: set[str], spared: Iterable[int] = ()) -> list[str]:
    """Everything of ours on this machine that was not there before the case: labelled containers (helpers
    included), networks and volumes, our nft table, qdiscs and NFQUEUE rules, the user's processes, and a .tmp
    file in the case's results."""
    found = [f"{kind} {name}" for kind in ("container", "network", "volume") for name in owned(kind)]
    found += impairment_here() + processes_of(uid, spared)
    found += [f"file {p}" for p in out.rglob("*.tmp")] if out.exists() else []
    return [x for x in found if x not in before]


# The parts of a cell a fault can hit, as a cell's error names them: the lab's services and the router, the
# delay line and the impairment, the Docker engine, the disk of the results, the board, a lab host, and the user
# (a signal to the CLI).
COMPONENTS = ("broker", "capture", "subscriber", "publisher", "router", "delay line", "impairment", "engine", "disk",
              "board", "host", "user")
# A component is named where its word stands on its own (any case): the character before it is none of a letter,
# a digit, '_', '-', '.' or '/', and the one after it is none of a letter, a digit, '_', '-' or '/', nor a '.'
# followed by one of them. So a name that only contains the word does not count (a container's
# testbed-testbed-user-1a2b3c4d-subscriber-1, a lab host's testbed-host-pub, a path's /home/testbed-user/...,
# a file's capture.pcapng), and a sentence's last word does.
_NAMED = re.compile(r"(?<![\w./-])(" + "|".join(re.escape(c) for c in COMPONENTS) + r")(?![\w/-]|\.[\w/-])",
                    re.IGNORECASE)


def first_component(error: str) -> str | None:
    """The component ``error`` names first: of every place where one of COMPONENTS is named (see _NAMED), the
    earliest; None when it names none."""
    found = _NAMED.search(error)
    return found.group(1).lower() if found else None


def checksums(run_dir: Path, manifest: Path) -> dict[str, str]:
    """sha256 of every file of a finished cell's run folder, and its entry in the bundle's manifest."""
    sums = {str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(run_dir.rglob("*")) if p.is_file()}
    entry = json.loads(manifest.read_text())["cells"][run_dir.name]
    sums["manifest entry"] = hashlib.sha256(json.dumps(entry, sort_keys=True).encode()).hexdigest()
    return sums


@pytest.fixture(scope="module")
def fault_lab(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest,
              docker_user: DockerUser) -> Iterator[tuple[Lab, Path]]:
    """The lab's hosts (tests/integration/labhosts.py: the broker host, the router and three publisher hosts) and the
    user's copy of their inventory and key; the user's Ansible master connections end with it. A cell of one device
    runs on the first publisher host alone (lab-host-paused), a fleet is dealt over the three (lab-fleet-host-lost)."""
    from tests.integration.test_lab_run import _user_copy

    require_image(request.config)
    with open_lab(tmp_path_factory.mktemp("fault-lab"), publishers=3) as lab:
        inventory = _user_copy(lab, docker_user)
        try:
            yield lab, inventory
        finally:
            for sock in (inventory.parent / "cp").glob("*"):
                docker_user.run(["ssh", "-F", "/dev/null", "-o", f"ControlPath={sock}", "-O", "exit", "lab"],
                                timeout=10)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not ROWS:
        return
    terminalreporter.section("fault suite (tests/faults): what each fault did")
    terminalreporter.write_line("| " + " | ".join(COLUMNS) + " |")
    terminalreporter.write_line("|" + "---|" * len(COLUMNS))
    for row in ROWS:
        cells = [row.get(c, "").replace("|", "/").replace("\n", " ") for c in COLUMNS]
        terminalreporter.write_line("| " + " | ".join(cells) + " |")
