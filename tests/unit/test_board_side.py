"""The lab's side of a board: the address it reaches the broker at, and the RUN it is sent."""

from __future__ import annotations

import ipaddress

import pytest

from orchestrator.errors import TestbedError
from orchestrator.lab.board_side import lab_address
from orchestrator.model.run import RunSpec
from orchestrator.publishers.board import records
from orchestrator.publishers.board.lines import Msg


def test_the_board_never_gets_a_loopback_address() -> None:
    with pytest.raises(TestbedError) as err:
        lab_address("127.0.0.1")
    assert "docker-proxy" in err.value.message
    with pytest.raises(TestbedError) as err:
        lab_address("lab.example")
    assert "not an IP address" in err.value.message
    assert lab_address("192.0.2.5") == "192.0.2.5"
    assert not ipaddress.ip_address(lab_address()).is_loopback  # this host's default-route address


def test_a_board_spec_needs_its_port_and_the_virtual_one_refuses_board_options() -> None:
    with pytest.raises(ValueError, match="needs --serial-port"):
        RunSpec(scenario="plain", publisher="esp32")
    with pytest.raises(ValueError, match="are for --publisher esp32"):
        RunSpec(scenario="plain", serial_port="/dev/ttyUSB0")


def test_without_clock_exchanges_the_send_times_stay_the_boards_and_say_why() -> None:
    est, why = records.board_clock_estimate([Msg(0, 1_000_000, 65, 78, 200_000, -50)])
    assert est is None and "no clock exchange" in str(why)


class _Lines:
    """A serial port whose modem lines are recorded (or, ``broken``, refused as on a pseudo-terminal)."""

    def __init__(self, broken: bool = False) -> None:
        self.broken, self.events = broken, []
        self.in_waiting = 0

    def __setattr__(self, name: str, value: object) -> None:
        if name in ("dtr", "rts"):
            if self.broken:
                raise OSError(25, "Inappropriate ioctl for device")
            self.events.append((name, value))
        object.__setattr__(self, name, value)

    def read(self, size: int = 1) -> bytes:
        return b""

    def write(self, data: bytes) -> int:
        return len(data)

    def flush(self) -> None: ...
    def reset_input_buffer(self) -> None: ...
    def close(self) -> None: ...


def test_reset_pulls_en_low_through_rts_with_gpio0_released_as_esptool_does() -> None:
    from orchestrator.publishers.board.link import BoardLink, BoardLinkError
    from orchestrator.waiting import Clock

    port = _Lines()
    slept: list[float] = []
    link = BoardLink("/dev/ttyUSB0", opener=lambda p, b: port, clock=Clock(sleep=slept.append))
    link.open()
    link.reset()
    assert port.events == [("dtr", False), ("rts", True), ("rts", False)] and slept == [0.1]
    pty = BoardLink("/dev/pts/4", opener=lambda p, b: _Lines(broken=True))
    pty.open()
    with pytest.raises(BoardLinkError) as err:
        pty.reset()
    assert "through DTR/RTS" in err.value.message and "--reset-board" in str(err.value.hint)


@pytest.mark.parametrize("wildcard", ["0.0.0.0", "::", "::ffff:0.0.0.0", "0.1.2.3", "255.255.255.255", "224.0.0.1",
                                      "ff02::1"])
def test_a_wildcard_board_host_is_refused_with_the_hint_to_give_the_interfaces_address(wildcard: str) -> None:
    with pytest.raises(TestbedError) as err:
        lab_address(wildcard)
    assert "no interface's address" in err.value.message and "every interface" in err.value.message
    assert err.value.hint is not None and "address of the interface the board reaches" in err.value.hint


def test_the_board_host_is_refused_before_the_serial_port_is_opened() -> None:
    from orchestrator.publishers.variants import variant_for

    spec = RunSpec(scenario="plain", publisher="esp32", serial_port="/nonexistent/ttyUSB9", board_host="::")
    with pytest.raises(TestbedError, match="--board-host :: is no interface's address"):
        variant_for(spec).check(spec)


def test_board_check_refuses_a_wildcard_board_host_before_it_opens_the_port(capsys: pytest.CaptureFixture[str]) -> None:
    from orchestrator.cli.main import main

    code = main(["board", "check", "--serial-port", "/nonexistent/ttyUSB9", "--board-host", "0.0.0.0"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 1 and "--board-host 0.0.0.0 is no interface's address" in err and "serial port" not in err, err
