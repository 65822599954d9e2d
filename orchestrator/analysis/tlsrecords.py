"""A TLS 1.3 PUBLISH record's overhead split into its parts, from the wire (metrics.json
``overhead_bytes.tls13_record``; docs/measurement-notes.md defines it).

A TLS 1.3 record on the wire is a 5-byte header and the AEAD ciphertext of the inner plaintext: the MQTT packet,
one byte of real content type, then zero bytes of padding (RFC 8446 5.2, 5.4), followed by the AEAD tag. With
the record's length field (``tls_record_len``) and the decrypted MQTT packet it carries (``mqtt_len``; records
pair 1:1 with messages, see messages.py) the padding is what is left:
``padding = tls_record_len - mqtt_len - 1 - tag``. The tag's size is the negotiated suite's (16 B for every
TLS 1.3 suite but TLS_AES_128_CCM_8_SHA256's 8). mbedTLS 3.x pads each record's inner plaintext to a multiple
of its build's ``MBEDTLS_SSL_CID_TLS1_3_PADDING_GRANULARITY``; OpenSSL does not pad. The granularity is the
device's own word (its summary's ``tls13_padding_granularity``), added by :func:`with_granularity`, and the
padding on the wire is checked against it.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

HEADER = 5
INNER_CONTENT_TYPE = 1
TLS13_TAG = {0x1301: 16, 0x1302: 16, 0x1303: 16, 0x1304: 16, 0x1305: 8}


def tls13_split(inbound: pd.DataFrame, version: str | None, suite_id: str | None) -> dict[str, Any] | None:
    """The split of the publisher->broker PUBLISH records of a TLS 1.3 run (None for any other run)."""
    if version != "TLS 1.3" or suite_id is None:
        return None
    tag = TLS13_TAG.get(int(suite_id, 16))
    both = inbound[["mqtt_len", "tls_record_len"]].astype("float64").dropna()
    if tag is None or both.empty:
        return {"records": 0, "reason": "no decrypted PUBLISH record" if tag else f"unknown tag size of {suite_id}"}
    padding = both["tls_record_len"] - both["mqtt_len"] - INNER_CONTENT_TYPE - tag
    by_len = {int(m): sorted({int(p) for p in part}) for m, part in padding.groupby(both["mqtt_len"])}
    return {
        "records": int(len(both)),
        "header": HEADER,
        "inner_content_type": INNER_CONTENT_TYPE,
        "tag": tag,
        "padding": float(padding.median()),
        "padding_values": sorted({int(p) for p in padding}),
        "padding_by_mqtt_len": {str(m): v[0] if len(v) == 1 else v for m, v in by_len.items()},
        "padding_granularity": None,
        "padding_granularity_source": "not reported by the client",
        "padding_as_granularity_implies": None,
    }


def add_split(overhead: dict[str, Any], inbound: pd.DataFrame, tls_block: dict[str, Any]) -> None:
    """``overhead_bytes.tls13_record`` for a TLS 1.3 run; nothing for plain and TLS 1.2 runs."""
    split = tls13_split(inbound, tls_block.get("version"), tls_block.get("cipher_suite_id"))
    if split is not None:
        overhead["tls13_record"] = split


def implied_padding(mqtt_len: int, granularity: int) -> int:
    """The zero bytes a sender padding to ``granularity`` adds after an MQTT packet of ``mqtt_len`` bytes (its
    inner plaintext is the packet + 1 content-type byte, rounded up to the next multiple)."""
    return -(mqtt_len + INNER_CONTENT_TYPE) % granularity


def with_granularity(metrics: dict[str, Any], granularity: Any, source: str) -> None:
    """The device's own padding granularity in the split, and whether every record's padding is what it
    implies (True/False; None when the device names none)."""
    split = (metrics.get("overhead_bytes") or {}).get("tls13_record")
    if not isinstance(split, dict) or not split.get("records"):
        return
    if not isinstance(granularity, int) or isinstance(granularity, bool) or granularity < 1:
        return
    split["padding_granularity"] = granularity
    split["padding_granularity_source"] = source
    seen = split["padding_by_mqtt_len"]
    split["padding_as_granularity_implies"] = all(
        value == implied_padding(int(m), granularity) for m, value in seen.items())
