"""Input that can be refused before a container starts is refused then, cleanly (issue 23 part 4)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

from orchestrator.cli.main import main


@pytest.mark.parametrize("port", ["99999", "0", "-1"])
def test_up_refuses_a_port_out_of_range_before_anything_starts(capsys: pytest.CaptureFixture[str],
                                                               port: str) -> None:
    code = main(["up", "--host-port", port])
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert code == 2, text
    assert "--host-port" in text
    assert "internal error" not in text and "OverflowError" not in text


def test_a_sweep_whose_cells_would_share_a_folder_is_refused(capsys: pytest.CaptureFixture[str],
                                                            tmp_path: Path) -> None:
    own = tmp_path / "x" / "tls.yaml"
    own.parent.mkdir()
    own.write_text((resources.files("orchestrator.scenarios") / "tls.yaml").read_text())
    out = tmp_path / "out"
    code = main(["sweep", "--scenarios", f"tls,{own}", "--payloads", "65", "--samples", "5", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "two cells would be named 'tls-65B-none-r1'" in err and "(rule cell-ids-unique)" in err, err
    assert not out.exists()
