"""Issue 22 part 1: which files can hold a secret is declared once (orchestrator/model/layout.py), and the
archive, the manifest, the file modes and the redaction of transcripts and evidence all follow it."""

from __future__ import annotations

import base64
import json
import stat
import tarfile
from pathlib import Path

import pytest

from orchestrator.errors import TestbedError
from orchestrator.model import layout
from orchestrator.model.layout import Layout, file_mode, is_secret, secret_kind
from orchestrator.publishers.board import protocol as p
from orchestrator.publishers.board.link import BoardLink
from orchestrator.redact import redact
from orchestrator.results import archive
from orchestrator.results.atomic import protect_secrets, write_json_atomic, write_text_atomic
from orchestrator.results.manifest import new_manifest

SECRET = [
    "pki/ca.key", "pki/server.key", "pki/publisher.key", "runs/tls-65B-none-r1/pki/subscriber.key",
    "pki/passwords.txt", "pki/publisher.password", "pki/passwords.hashed", "priv/passwords", "passwd",
    "keylogs/publisher.keys", "keylogs/subscriber.keys", "runs/c/keylogs/anything.txt", "keylogs/fleet/d7.keys",
    "logs/hosts/pub1/publisher.keys", "logs/hosts/b/sslkeys.keylog",
    "logs/serial.log", "runs/c/logs/serial.log", "logs/serial_transcript.log", "runs/c/logs/serial_transcript.log",
    "inventory", "inventory.yml", "inventory.ini", "runs/c/inventory.yaml",
]
PUBLIC = [
    "manifest.json", "summary.csv", "comparisons.csv", "report.md", "report.html", "plots/latency.svg",
    "runs/c/cell.json", "runs/c/metrics.json", "runs/c/per_message.csv", "runs/c/packets.csv",
    "runs/c/connections.csv", "runs/c/devices.csv", "runs/c/impairment.json", "runs/c/resources.json",
    "pki/ca.crt", "pki/server.crt", "pki/publisher.crt", "pki/pki.json", "config/mosquitto.conf",
    "config/openssl.cnf", "config/scenario.json", "config/acl", "config/mosquitto.native.conf",
    "logs/subscriber.csv", "logs/subscriber_status.json", "logs/publisher.csv",
    "logs/publisher_summary.json", "logs/publisher_connections.csv", "logs/board_messages.csv",
    "logs/broker.log", "logs/containers.json", "logs/host_clock.json", "logs/fleet/summary.json",
    "logs/hosts/b/broker.log", "logs/hosts/b/broker.rc", "logs/hosts/p/clock_pre.csv", "logs/serial.log.txt.csv",
    "keylogs.md", "inventory_notes/x.csv",
]


@pytest.mark.parametrize("rel", SECRET)
def test_every_file_that_can_hold_a_secret_is_declared(rel: str) -> None:
    assert is_secret(rel), rel
    assert file_mode(rel) == 0o600
    assert is_secret(Path("/home/u/results/b") / rel)  # also as an absolute path


# evidence that can hold a secret value (a plain CONNECT's password): archived (the value overwritten), but 0600
PRIVATE = ["capture/capture.pcapng", "runs/c/capture/capture.pcapng", "blocks/lab-001/capture/gaps.pcapng"]


@pytest.mark.parametrize("rel", PUBLIC)
def test_nothing_else_is(rel: str) -> None:
    assert secret_kind(rel) is None, (rel, secret_kind(rel))
    assert file_mode(rel) == 0o644


@pytest.mark.parametrize("rel", PRIVATE)
def test_a_capture_is_written_0600_but_archived(rel: str) -> None:
    assert secret_kind(rel) is None, (rel, secret_kind(rel))  # not left out of the archive (results/scrub.py)
    assert file_mode(rel) == 0o600


def test_the_layouts_own_secret_paths_are_declared(tmp_path: Path) -> None:
    lay = Layout(tmp_path / "run")
    for path in (lay.serial_log, lay.serial_transcript, lay.keylogs / "publisher.keys", lay.pki / "passwords.txt",
                 lay.pki / "ca.key", lay.inventory_copy(Path("/x/lab.yml"))):
        assert is_secret(path.relative_to(lay.root)), path
    for path in (lay.cell, lay.metrics, lay.capture, lay.publisher_log, lay.subscriber_log, lay.containers):
        assert not is_secret(path.relative_to(lay.root)), path


def test_every_declaration_is_used_and_the_manifest_lists_them_all() -> None:
    globs = layout.secrets_in_bundle()
    assert len(globs) == len(layout.SECRET_FILES) == len(set(globs))
    for s in layout.SECRET_FILES:  # each one is the reason for at least one of the examples above
        assert any(s.pattern.search(rel) for rel in SECRET), s.glob
    from orchestrator.model.sweep import SweepPlan
    m = new_manifest(SweepPlan(payloads=[65]), "x", ["testbed"], source={}, environment={})
    assert m["secrets_in_bundle"] == globs


def test_files_are_written_with_their_declared_mode(tmp_path: Path) -> None:
    lay = Layout(tmp_path)
    write_text_atomic(lay.keylogs / "publisher.keys", "CLIENT_RANDOM aa bb\n")
    write_text_atomic(lay.serial_transcript, "x\n")
    write_json_atomic(lay.cell, {})
    write_text_atomic(lay.pki / "passwords.txt", "publisher:x\n")
    modes = {p.relative_to(tmp_path).as_posix(): stat.S_IMODE(p.stat().st_mode)
             for p in tmp_path.rglob("*") if p.is_file()}
    assert modes == {"keylogs/publisher.keys": 0o600, "logs/serial_transcript.log": 0o600, "cell.json": 0o644,
                     "pki/passwords.txt": 0o600}


def test_protect_secrets_closes_what_another_writer_left_open(tmp_path: Path) -> None:
    (tmp_path / "keylogs").mkdir()
    (tmp_path / "logs").mkdir()
    for rel in ("keylogs/subscriber.keys", "logs/serial.log", "logs/subscriber.csv", "inventory.yml"):
        (tmp_path / rel).write_text("x")
        (tmp_path / rel).chmod(0o644)
    changed = protect_secrets(tmp_path)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in changed) == [
        "inventory.yml", "keylogs/subscriber.keys", "logs/serial.log"]
    assert stat.S_IMODE((tmp_path / "logs" / "subscriber.csv").stat().st_mode) == 0o644
    assert protect_secrets(tmp_path) == []


# ---------------------------------------------------------------------------------------------- redaction
KEY_PEM = ("-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgQ1sYkHzk0B3PKUqN\n"
           "hRG5d3oM1QWJpLcNKmqvXAn5M8ehRANCAAT0pqf7Gk2iXzCrQq4Wm9a7L3lO5Yw2\n-----END PRIVATE KEY-----\n")
PASSWORD = "s3cr3t-Pw_0123456789ab"
HEX1, HEX2 = "a1" * 32, "b2" * 48
LABELS = ["CLIENT_RANDOM", "CLIENT_HANDSHAKE_TRAFFIC_SECRET", "SERVER_HANDSHAKE_TRAFFIC_SECRET",
          "CLIENT_TRAFFIC_SECRET_0", "SERVER_TRAFFIC_SECRET_0", "EXPORTER_SECRET", "CLIENT_EARLY_TRAFFIC_SECRET",
          "EARLY_EXPORTER_SECRET", "CLIENT_TRAFFIC_SECRET_1"]


def _leaks(text: str) -> list[str]:
    body_lines = [ln for ln in KEY_PEM.splitlines() if not ln.startswith("-----")]
    found = [s for s in [PASSWORD, HEX1, HEX2, *body_lines] if s in text]
    found += [label for label in LABELS if f"{label} {HEX1}" in text]
    return found


def test_a_transcript_with_a_run_chunk_keylog_lines_and_a_key_keeps_nothing_of_them() -> None:
    cell = p.RunCell(id="c1", host="10.0.0.1", port=8883, transport="tls", payload=65, samples=2,
                     interval_us=1000, ciphers=("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",), ca="CA",
                     cert="CERT", key=KEY_PEM, username="publisher", password=PASSWORD, keylog=True)
    frames = p.encode_run(cell, 256)
    assert PASSWORD.encode() in frames.body
    lines = [f"> {frames.begin}", *(f"> {c}" for c in frames.chunks), f"> {frames.end}",
             *(f"< KEYLOG {label} {HEX1} {HEX2}" for label in LABELS),
             *(f"{label} {HEX1} {HEX2}" for label in LABELS),  # bare NSS lines, as a key log file has them
             f"password={PASSWORD}", f'{{"password": "{PASSWORD}"}}', f"vdevice --password {PASSWORD} --qos 0",
             "body: key=" + KEY_PEM.replace("\n", "\\n"), KEY_PEM, "< MSG seq=1 t=5 bytes=65"]
    text = "\n".join(lines)
    assert len(_leaks(text)) > 10
    clean = redact(text)
    assert _leaks(clean) == [], _leaks(clean)
    assert "< MSG seq=1 t=5 bytes=65" in clean and frames.begin in clean  # the rest stays readable
    assert "--password-file /data/pki/passwords.txt" in redact("--password-file /data/pki/passwords.txt")
    # a key cut short (the transcript's first line falls inside it) goes all the same
    assert _leaks(redact(KEY_PEM.split("-----END")[0])) == []
    assert _leaks(redact("\n".join(KEY_PEM.splitlines()[1:3]))) == []


class _FakePort:
    def __init__(self, data: bytes) -> None:
        self.data = bytearray(data)
        self.written = bytearray()

    @property
    def in_waiting(self) -> int:
        return len(self.data)

    def read(self, size: int = 1) -> bytes:
        out, self.data = bytes(self.data[:size]), self.data[size:]
        return out

    def write(self, data: bytes) -> int:
        self.written += data
        return len(data)

    def flush(self) -> None: ...
    def reset_input_buffer(self) -> None: ...
    def close(self) -> None: ...


def test_the_board_links_transcript_is_redacted_where_it_is_written() -> None:
    board_says = "".join(f"KEYLOG {label} {HEX1} {HEX2}\n" for label in LABELS) + "MSG seq=0\n"
    port = _FakePort(board_says.encode())
    link = BoardLink("fake", opener=lambda _p, _b: port)
    link.open()
    cell = p.RunCell(id="c1", host="h", port=1883, transport="plain", payload=65, samples=1, interval_us=1000,
                     username="publisher", password=PASSWORD)
    chunks = p.encode_run(cell, 256).chunks
    for line in chunks:
        link.write_line(line)
    while link.read_text(0.01) is not None:
        pass
    assert b"".join(base64.b64decode(c.split()[-1]) for c in bytes(port.written).decode().split("\n") if c) \
        .count(PASSWORD.encode()) == 1  # the board gets its RUN whole
    transcript = "\n".join(link.transcript)
    assert _leaks(transcript) == [] and "KEYLOG" in transcript and "RUN CHUNK i=0" in transcript
    assert not any(c.split()[-1] in transcript for c in chunks)
    assert link.last_text == "MSG seq=0"  # the raw line (serial.log's, a declared secret) is not touched


def test_error_evidence_is_redacted_when_the_error_is_made() -> None:
    exc = TestbedError(f"the board refused: password={PASSWORD}",
                       evidence=f"< KEYLOG CLIENT_RANDOM {HEX1} {HEX2}\n{KEY_PEM}",
                       hint=f"try --password {PASSWORD}")
    assert _leaks(exc.message + (exc.evidence or "") + (exc.hint or "")) == []


# ---------------------------------------------------------------------------------------------- archive
def _bundle(root: Path) -> Path:
    run = root / "runs" / "tls-65B-none-r1"
    files = {"cell.json": "{}", "metrics.json": "{}", "pki/ca.crt": "public", "pki/ca.key": KEY_PEM,
             "pki/publisher.key": KEY_PEM, "pki/passwords.txt": f"publisher:{PASSWORD}\n",
             "keylogs/publisher.keys": f"CLIENT_RANDOM {HEX1} {HEX2}\n",
             "logs/serial.log": f"KEYLOG CLIENT_RANDOM {HEX1} {HEX2}\nMSG seq=0\n",
             "logs/serial_transcript.log": "> RUN CHUNK i=0 <redacted>\n", "logs/board_messages.csv": "seq\n0\n"}
    for rel, text in files.items():
        (run / rel).parent.mkdir(parents=True, exist_ok=True)
        (run / rel).write_text(text)
    (root / "inventory.yml").write_text("all: {vars: {ansible_password: x}}\n")
    (root / "manifest.json").write_text(json.dumps({"schema_version": 1}))
    return root


def test_the_archive_leaves_out_exactly_the_declared_files_and_names_them(tmp_path: Path) -> None:
    b = _bundle(tmp_path / "b")
    dest, excluded = archive.archive(b)
    assert excluded == ["inventory.yml", "runs/tls-65B-none-r1/keylogs/publisher.keys",
                        "runs/tls-65B-none-r1/logs/serial.log", "runs/tls-65B-none-r1/logs/serial_transcript.log",
                        "runs/tls-65B-none-r1/pki/ca.key", "runs/tls-65B-none-r1/pki/passwords.txt",
                        "runs/tls-65B-none-r1/pki/publisher.key"]
    with tarfile.open(dest) as tar:
        names = {m.name.split("/", 1)[1] for m in tar.getmembers() if m.isfile()}
        data = b"".join(tar.extractfile(m).read() for m in tar.getmembers() if m.isfile())  # type: ignore[union-attr]
    assert not names & set(excluded)
    assert PASSWORD.encode() not in data and HEX1.encode() not in data and b"PRIVATE KEY" not in data
    manifest = json.loads((b / "manifest.json").read_text())
    assert manifest["archive"]["excluded"] == excluded
    assert manifest["secrets_in_bundle"] == layout.secrets_in_bundle()


def test_the_cli_names_every_file_it_left_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from orchestrator.cli.main import main

    b = _bundle(tmp_path / "b")
    assert main(["archive", str(b)]) == 0
    out = capsys.readouterr().out
    listed = [ln.strip() for ln in out.splitlines() if ln.startswith("  ")]
    excluded = json.loads((b / "manifest.json").read_text())["archive"]["excluded"]
    assert listed == excluded and f"left out {len(excluded)} secret file(s)" in out


def test_a_password_in_a_plain_capture_is_overwritten_in_the_archives_copy(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.results import scrub

    monkeypatch.setattr(scrub, "CHUNK", 7)  # every value crosses a chunk boundary somewhere
    b = _bundle(tmp_path / "b")
    run = b / "runs" / "tls-65B-none-r1"
    key_line = KEY_PEM.splitlines()[1]
    capture = b"\x0a\x0d\x0d\x0a" + b"\x10publisher" + PASSWORD.encode() * 3 + b"x" * 50 + key_line.encode() + b"end"
    (run / "capture").mkdir()
    (run / "capture" / "capture.pcapng").write_bytes(capture)
    dest, _ = archive.archive(b)
    with tarfile.open(dest) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("capture.pcapng"))
        packed = tar.extractfile(member).read()  # type: ignore[union-attr]
    assert len(packed) == len(capture) and PASSWORD.encode() not in packed and key_line.encode() not in packed
    assert packed.count(b"*" * len(PASSWORD)) >= 3 and packed.endswith(b"end") and packed.startswith(capture[:14])
    assert (run / "capture" / "capture.pcapng").read_bytes() == capture  # the bundle itself is untouched
    manifest = json.loads((b / "manifest.json").read_text())
    assert manifest["archive"]["scrubbed"] == {"runs/tls-65B-none-r1/capture/capture.pcapng": 4}
    assert archive.verify(dest)[1] == []


def test_the_inventorys_copy_is_private(tmp_path: Path) -> None:
    from orchestrator.model.layout import inventory_copy
    from orchestrator.results.atomic import copy_file_atomic

    source = tmp_path / "lab.yml"
    source.write_text("all: {vars: {ansible_password: x}}\n")
    source.chmod(0o644)
    copy = copy_file_atomic(source, inventory_copy(tmp_path / "run", source))
    assert copy.name == "inventory.yml" and stat.S_IMODE(copy.stat().st_mode) == 0o600
    assert copy.read_text() == source.read_text()
