"""Input that can be refused before a container starts is refused then, cleanly (issue 23 part 4)."""

from __future__ import annotations

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
