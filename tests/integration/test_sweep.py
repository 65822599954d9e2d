"""`testbed sweep` faults and bundle guarantees, on real containers. Ctrl-C mid-cell then `--resume`, and the broker
killed mid-cell, are cases of the fault suite (tests/faults: the cell named, the finished cell byte-identical, exactly
the missing cell run on resume); a killed broker's cell not stopping the next is test_kept_lab's."""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

import pytest

from .conftest import only_bundle, owned, run_testbed

FAST = ["--samples", "30", "--interval", "20ms"]
DERIVED = ("summary.csv", "comparisons.csv", "report.md", "report.html")


def _cell(bundle: Path, cell_id: str) -> dict:
    return json.loads((bundle / "runs" / cell_id / "cell.json").read_text())


@pytest.fixture(scope="module")
def finished_bundle(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sweep")
    run_testbed("down")
    proc = run_testbed("sweep", "--payloads", "65,100", *FAST, "--out", str(out), timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return only_bundle(out)


def test_sweep_writes_a_complete_bundle(finished_bundle):
    b = finished_bundle
    manifest = json.loads((b / "manifest.json").read_text())
    assert manifest["schema_version"] == 2 and manifest["seed"] == 1
    env = manifest["environment"]
    for key in ("docker", "compose", "tshark", "image_digests", "versions", "host", "configured"):
        assert env[key], key
    # the images the cells' containers ran, and the versions read inside them
    assert set(env["image_digests"]) == {"broker", "capture", "subscriber", "publisher"}
    assert env["versions"]["publisher"]["libmbedtls14"].startswith("2.28")
    assert env["versions"]["broker"]["mosquitto"].startswith("2.0")
    cells = ["plain-65B-none-r1", "tls-65B-none-r1", "plain-100B-none-r1", "tls-100B-none-r1"]
    assert sorted(manifest["cells"]) == sorted(cells)
    for c in cells:
        assert _cell(b, c)["status"] == "ok"
        assert manifest["cells"][c]["status"] == "ok"
    for f in DERIVED:
        assert (b / f).stat().st_size > 0
    assert len(list((b / "plots").glob("*.png"))) >= 4
    html = (b / "report.html").read_text()
    assert "data:image/png;base64," in html and "http://" not in html and "https://" not in html


def _digest(bundle: Path) -> dict[str, str]:
    files = [bundle / f for f in DERIVED] + sorted((bundle / "plots").glob("*.png"))
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


def test_report_rebuilds_identical_files_twice(finished_bundle):
    first = run_testbed("report", str(finished_bundle))
    assert first.returncode == 0, first.stderr
    d1 = _digest(finished_bundle)
    second = run_testbed("report", str(finished_bundle))
    assert second.returncode == 0, second.stderr
    assert _digest(finished_bundle) == d1


def test_archive_leaves_secrets_out_and_verify_catches_tampering(finished_bundle, tmp_path):
    proc = run_testbed("archive", str(finished_bundle))
    assert proc.returncode == 0, proc.stderr
    archive = finished_bundle.with_name(finished_bundle.name + ".tar.gz")
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert any(n.endswith("/SHA256SUMS") for n in names)
    assert not any(n.endswith(".key") or "/keylogs/" in n or n.endswith("passwords.txt") for n in names)
    assert any(n.endswith("capture/capture.pcapng") for n in names)
    manifest = json.loads((finished_bundle / "manifest.json").read_text())
    assert manifest["archive"]["secrets_included"] is False and manifest["archive"]["excluded"]
    ok = run_testbed("verify", str(archive))
    assert ok.returncode == 0 and "all checksums match" in ok.stdout
    # tamper: rewrite one member
    bad = tmp_path / "bad.tar.gz"
    with tarfile.open(archive) as src, tarfile.open(bad, "w:gz") as dst:
        for m in src.getmembers():
            data = src.extractfile(m).read() if m.isfile() else None
            if m.name.endswith("summary.csv"):
                data = data + b"tampered\n"
                m.size = len(data)
            dst.addfile(m, None if data is None else __import__("io").BytesIO(data))
    res = run_testbed("verify", str(bad))
    assert res.returncode == 1 and "checksum mismatch: summary.csv" in res.stderr


def test_unwritable_out_refused_before_the_first_cell(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    proc = run_testbed("sweep", "--payloads", "65", *FAST, "--out", str(blocker / "sub"))
    assert proc.returncode == 1 and "cannot write results to" in proc.stderr
    assert owned("container") == []


@pytest.mark.parametrize("args,message", [
    (["--payloads", "20"], "below the minimum of 62 B"),
    (["--samples", "0"], "samples"),
    (["--scenarios", "plain,nope"], "unknown scenario 'nope'"),
    (["--impairments", "nope"], "unknown impairment profile"),
])
def test_impossible_plan_refused_before_anything_starts(tmp_path, args, message):
    proc = run_testbed("sweep", *args, "--out", str(tmp_path))
    assert proc.returncode == 1 and message in proc.stderr
    assert list(tmp_path.iterdir()) == []
    assert owned("container") == []
