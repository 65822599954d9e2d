"""No password on any command line during a cell on this host (issue 22): `ps -eo args` polled while a `tls` run
(password authentication) publishes, for vdevice and for the fleet. The device reads its password with
--password-file from the 0600 file pki/publisher.password, which is removed after the cell. The runs succeeding
proves the password got through."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from .conftest import run_testbed
from .labhosts import polling


@contextmanager
def polling_ps() -> Iterator[list[str]]:
    """Every process's whole command line on this host (-ww: never cut at a width), snapshot after snapshot,
    until the block ends."""
    snapshots: list[str] = []

    def poll() -> None:
        snapshots.append(subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True,
                                        check=False).stdout)

    with polling(poll):
        yield snapshots


def passwords(run: Path) -> list[str]:
    lines = (run / "pki" / "passwords.txt").read_text().splitlines()
    return [line.split(":", 1)[1] for line in lines if ":" in line]


@pytest.fixture
def down() -> Iterator[None]:
    run_testbed("down")
    yield
    run_testbed("down")


@pytest.mark.parametrize(("program", "extra"), [("vdevice", []), ("fleet", ["--devices", "4"])])
def test_ps_shows_no_password_while_a_password_cell_runs(tmp_path: Path, down: None, program: str,
                                                         extra: list[str]) -> None:
    out = tmp_path / program
    with polling_ps() as snapshots:
        started = time.monotonic()
        proc = run_testbed("run", "--scenario", "tls", "--samples", "300", "--interval", "10ms", *extra,
                           "--out", str(out))
        took = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads((out / "cell.json").read_text())["status"] == "ok"  # the broker took the password
    secrets = passwords(out)
    assert len(secrets) == 2 and all(len(s) >= 20 for s in secrets)
    during = [s for s in snapshots if f"{program} " in s and "--username publisher" in s]
    leaked = [line for snap in snapshots for line in snap.splitlines() if any(pw in line for pw in secrets)]
    print(f"{program}: {len(snapshots)} ps snapshots in {took:.1f} s, {len(during)} while the device ran; "
          f"lines with a password: {len(leaked)}")
    assert len(during) >= 5, "the polls never saw the device run"
    assert leaked == []
    assert not (out / "pki" / "publisher.password").exists()  # read at start, removed after the cell
