"""The ClientHello's offered cipher suites, read from the bytes of a reference capture (tlswire), in the client's
order with its signalling value: what `testbed board check` compares with the scenario's list."""

from __future__ import annotations

from analysis_helpers import reference_dir

from orchestrator.analysis import tlswire

SCSV = 0x00FF  # TLS_EMPTY_RENEGOTIATION_INFO_SCSV: mbedTLS signals secure renegotiation with it


def _offered(name: str, port: int) -> list[tuple[int, ...]]:
    conns = tlswire.connections(reference_dir() / name, port)
    return [tlswire.tls_side(c.up.stream()).hellos[0].suites for c in conns]


def test_the_tls12_chacha_capture_offers_the_one_suite_and_the_scsv() -> None:
    offered = _offered("lat_t12chacha.pcap", 8883)
    assert offered and set(offered) == {(0xCCA8, SCSV)}


def test_the_tls13_capture_offers_the_three_tls13_suites() -> None:
    offered = _offered("lat_t13chacha.pcap", 8884)
    assert offered and set(offered) == {(0x1302, 0x1303, 0x1301, SCSV)}


def test_a_server_hello_has_no_offered_suites() -> None:
    conn = tlswire.connections(reference_dir() / "lat_t12chacha.pcap", 8883)[0]
    server = tlswire.tls_side(conn.down.stream())
    assert server.hellos[0].cipher == 0xCCA8 and server.hellos[0].suites == ()
