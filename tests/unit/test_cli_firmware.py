"""`testbed firmware` at the CLI boundary: clear one-line errors, no traceback, secrets never printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.backends import platformio
from orchestrator.cli.main import main


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_firmware_is_registered_with_its_commands(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = _run(capsys, "firmware", "--help")
    assert code == 0
    for command in ("build", "upload", "monitor"):
        assert command in out


def test_build_refuses_payload_below_minimum(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _out, err = _run(
        capsys, "firmware", "build", "--scenario", "tls", "--payload", "40", "--pki-dir", str(tmp_path)
    )
    assert code == 1
    assert "minimum for device id 'e1' and 200 samples is 62 B" in err
    assert "Traceback" not in err


def test_build_names_missing_secrets_without_printing_values(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TESTBED_WIFI_SSID", "lab-ssid-secret")
    monkeypatch.delenv("TESTBED_WIFI_PASSWORD", raising=False)
    monkeypatch.delenv("TESTBED_BROKER_HOST", raising=False)
    code, out, err = _run(capsys, "firmware", "build", "--scenario", "tls", "--pki-dir", str(tmp_path))
    assert code == 1
    assert "TESTBED_WIFI_PASSWORD, TESTBED_BROKER_HOST" in err
    assert "lab-ssid-secret" not in out + err


def test_build_without_pio_is_one_clear_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in platformio.SECRET_ENV:
        monkeypatch.setenv(name, "x")
    monkeypatch.setattr(platformio, "find_pio", _no_pio)
    code, _out, err = _run(capsys, "firmware", "build", "--scenario", "plain", "--pki-dir", str(tmp_path))
    assert code == 1
    assert "PlatformIO (`pio`) is not installed" in err
    assert "Traceback" not in err


def _no_pio() -> str:
    raise platformio.TestbedError("PlatformIO (`pio`) is not installed", hint="pip install platformio")


def test_unknown_board_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = _run(capsys, "firmware", "upload", "--port", "/dev/null", "--board", "uno")
    assert code == 1
    assert "unknown board environment 'uno'" in err


def test_upload_needs_a_port(capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = _run(capsys, "firmware", "upload")
    assert code == 2
    assert "--port" in err
