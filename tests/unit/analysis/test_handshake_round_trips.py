"""connections.csv ``handshake_round_trips`` (analysis/handshake_flights.py) on real captures, with and without keys:
TLS 1.2 full = 2, TLS 1.2 resumed by session ID or ticket = 1, TLS 1.3 full = 1, TLS 1.3 PSK-resumed = 1, plain None.

Cross-checked by hand with tshark on tests/fixtures/connections/t12_session_id.pcapng
(``tshark -r X -Y "tcp.stream==N && tls" -T fields -e frame.number -e tcp.srcport -e tls.record.content_type
-e tls.handshake.type``; client port 60050/60052, broker 18883):

- stream 0 (full): 4 client 22 ClientHello | 6 server 22x4 ServerHello, Certificate, ServerKeyExchange,
  ServerHelloDone | 8 client 22,20,22 ClientKeyExchange, CCS, Finished (wait 1) | 9 server 20,22 CCS, Finished |
  10 client 23 application data (wait 2): 2 round trips.
- stream 1 (resumed-id): 25 client ClientHello | 27 server 22,20,22 ServerHello, CCS, Finished | 29 client 20,22
  CCS, Finished (wait 1) | 30 client 23 application data, no server record in between: 1 round trip.

And on tls13_mbedtls36/tls13_resume_ticket.pcapng stream 1 (resumed-psk, ``-d tcp.port==56893,tls``): 28 client
ClientHello | 30 server ServerHello, CCS, encrypted records | 32 client CCS, 33 client encrypted record (its
Finished; wait 1): 1 round trip.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.analysis.connections import connections_table
from orchestrator.backends.tshark import export_chunks

FIX = Path(__file__).resolve().parents[2] / "fixtures"
T13, T12, CONN = FIX / "analysis" / "tls13_mbedtls36", FIX / "analysis" / "tls12_device_stacks", FIX / "connections"
REF = Path(os.environ.get("TESTBED_REFERENCE_CAPTURES")
           or Path(__file__).resolve().parents[3].parent / "shared" / "reference-captures").resolve()
EXPECTED = {("TLS 1.2", "full"): 2, ("TLS 1.2", "resumed-id"): 1, ("TLS 1.2", "resumed-ticket"): 1,
            ("TLS 1.3", "full"): 1, ("TLS 1.3", "resumed-psk"): 1}
# (capture, broker port, key logs, the handshakes it holds in order)
CASES = (
    (T13 / "tls13_65_100.pcapng", 56893, (T13 / "p65" / "keys.log", T13 / "p100" / "keys.log"), ["full"] * 2),
    (T13 / "tls13_resume_ticket.pcapng", 56893, (T13 / "resume" / "keys.log",), ["full"] + ["resumed-psk"] * 2),
    (T12 / "tls12_mbedtls228.pcapng", 39231, (), ["full"] * 2),
    (T12 / "tls12_mbedtls36.pcapng", 39231, (), ["full"] * 2),
    (CONN / "t12_session_id.pcapng", 18883, (CONN / "t12_session_id.keys.log",), ["full"] + ["resumed-id"] * 2
     + ["full"]),
    (CONN / "t12_ticket.pcapng", 18883, (CONN / "t12_ticket.keys.log",), ["full"] + ["resumed-ticket"] * 2),
    (CONN / "t13_psk.pcap", 18884, (CONN / "t13_psk.keys.log",), ["full"] + ["resumed-psk"] * 2),
)


@pytest.mark.parametrize("keys", [True, False], ids=["keys", "no-keys"])
@pytest.mark.parametrize(("pcap", "port", "keylogs", "kinds"), CASES, ids=[c[0].name for c in CASES])
def test_round_trips_by_version_and_kind(pcap: Path, port: int, keylogs: tuple[Path, ...], kinds: list[str],
                                         keys: bool) -> None:
    table = connections_table(pcap, port, True, keylogs if keys else (), export_chunks)
    assert list(table["handshake"]) == kinds
    expected = [EXPECTED[(v, k)] for v, k in zip(table["tls_version"], kinds, strict=True)]
    assert list(table["handshake_round_trips"]) == expected


def test_the_tshark_cross_check_of_the_docstring() -> None:
    table = connections_table(CONN / "t12_session_id.pcapng", 18883, True, (), export_chunks)
    assert list(table["handshake_round_trips"][:2]) == [2, 1]


def test_plain_mqtt_has_no_handshake_round_trips() -> None:
    table = connections_table(CONN / "plain.pcapng", 11883, False, (), export_chunks)
    assert len(table) == 3 and table["handshake_round_trips"].isna().all()


@pytest.mark.parametrize(("name", "port", "version", "trips"), [("lat_t12chacha", 8883, "TLS 1.2", 2),
                                                                  ("lat_t12aes", 8885, "TLS 1.2", 2),
                                                                  ("lat_t13chacha", 8884, "TLS 1.3", 1)])
def test_an_independent_stack_openssl_client(name: str, port: int, version: str, trips: int) -> None:
    """paho-mqtt over OpenSSL 3.0 against Mosquitto (/work/shared/reference-captures/README.md): every connection,
    publisher's and subscriber's, is a full handshake."""
    if not (REF / "README.md").is_file():
        pytest.fail(f"reference captures not found at {REF}: set TESTBED_REFERENCE_CAPTURES")
    table = connections_table(REF / f"{name}.pcap", port, True, (REF / f"{name}.keys.log",), export_chunks)
    assert len(table) == 4
    assert set(table["tls_version"]) == {version} and set(table["handshake"]) == {"full"}
    assert list(table["handshake_round_trips"]) == [trips] * 4
