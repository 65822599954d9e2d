"""Impairment on a board's path: the broker's ingress for packets from outside the lab network."""

from __future__ import annotations

import ipaddress

import pytest

from orchestrator.backends.impairment import board, queue
from orchestrator.backends.impairment.argv import apply_argvs, clear_argvs
from orchestrator.backends.impairment.models import Hook, ImpairmentTarget
from orchestrator.errors import TestbedError
from orchestrator.model.impairment import Impairment, load_impairment

LAB = ipaddress.ip_network("172.30.0.0/16")
BROKER = "testbed-broker-1"


def _target(imp: Impairment) -> ImpairmentTarget:
    return ImpairmentTarget(label="publisher", container=BROKER, interface="eth0", hook=Hook.INGRESS,
                            source_outside=LAB, line=imp.needs_netem, delays=bool(imp.delay_ms or imp.jitter_ms))


def test_plain_loss_is_an_nft_drop_of_packets_from_outside_the_lab_network() -> None:
    imp = load_impairment("lossy-5pct")
    argvs = apply_argvs(imp, _target(imp), mechanism="queue")
    assert len(argvs) == 3 and not any(queue.LINE in a for a in argvs)
    rule = argvs[-1]
    i = rule.index("saddr")
    assert rule[i - 1:i + 3] == ["ip", "saddr", "!=", "172.30.0.0/16"] and rule[-2:] == ["counter", "drop"]


def test_delay_is_the_line_at_prerouting_with_the_same_match_and_loss_stays_nfts() -> None:
    imp = load_impairment("wifi-good")  # 5 +/- 2 ms, fifo, 0.1 % loss (uncorrelated)
    t = _target(imp)
    argvs = apply_argvs(imp, t, mechanism="queue", seed=3)
    start = next(a for a in argvs if queue.LINE in a)
    opts = start[start.index(queue.LINE) + 1:]
    assert opts[opts.index("--delay-ms") + 1] == "5" and opts[opts.index("--jitter-ms") + 1] == "2"
    assert opts[opts.index("--order") + 1] == "fifo" and "--loss-pct" not in opts
    jump = next(a for a in argvs if "PREROUTING" in a)
    assert jump[jump.index("PREROUTING") + 2:] == ["!", "-s", "172.30.0.0/16", "-j", queue.chain(queue.LOSS_QUEUE)]
    assert argvs[-1][-2:] == ["counter", "drop"]  # the 0.1 % is nft's, before the line
    clear = [c.argv for c in clear_argvs(t)]
    assert any("-D" in a and "PREROUTING" in a and "!" in a for a in clear)  # the same match, deleted
    assert queue.runs_line(imp, t)


def test_correlated_loss_and_delay_share_one_line() -> None:
    imp = Impairment(name="burst", delay_ms=10, loss_pct=2, loss_correlation_pct=25)
    argvs = apply_argvs(imp, _target(imp), mechanism="queue")
    start = next(a for a in argvs if queue.LINE in a)
    assert "--loss-correlation-pct" in start and start[start.index("--delay-ms") + 1] == "10"
    assert not any("nft" in a and "drop" in a for a in argvs)


def test_a_virtual_publishers_loss_line_still_does_not_delay() -> None:
    imp = Impairment(name="burst", delay_ms=10, loss_pct=2, loss_correlation_pct=25)
    t = ImpairmentTarget(label="publisher", container=BROKER, interface="eth0", hook=Hook.INGRESS,
                         source_ip="172.30.0.5", line=True)
    start = next(a for a in apply_argvs(imp, t, mechanism="queue") if queue.LINE in a)
    assert start[start.index("--delay-ms") + 1] == "0" and "--jitter-ms" not in start


def test_delays_needs_an_ingress_line() -> None:
    with pytest.raises(ValueError, match="delays"):
        ImpairmentTarget(label="publisher", container=BROKER, interface="eth0", hook=Hook.INGRESS, delays=True)


def test_what_cannot_act_on_a_boards_path_is_refused_by_name() -> None:
    with pytest.raises(TestbedError, match="rate.*radio"):
        board.check_board_profile(load_impairment("narrowband-250kbit"), "auto")
    with pytest.raises(TestbedError, match="netem delays a sender's egress"):
        board.check_board_profile(load_impairment("wifi-good"), "netem")
    board.check_board_profile(load_impairment("lossy-1pct"), "netem")  # loss only: nft, whatever was asked
    assert board.board_mechanism(load_impairment("wifi-good")) == "queue"
    assert board.board_mechanism(load_impairment("lossy-1pct")) is None


def test_the_record_says_what_the_capture_does_not_see() -> None:
    text = board.where_on_board_path(load_impairment("wifi-good"), str(LAB))
    assert "outside 172.30.0.0/16" in text and "PREROUTING" in text and "do NOT include the injected delay" in text
