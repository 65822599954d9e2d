"""Secrets taken out of text that is written or shown: transcripts, error messages and their evidence.

What goes: TLS key-log lines (the NSS format: CLIENT_RANDOM, the TLS 1.3 ``*_SECRET`` labels, RSA; also
behind a board's ``KEYLOG`` prefix), PEM private-key blocks (also with their newlines escaped as ``\\n``, as
a board's RUN body carries them, and a block cut short), password values (``password=...``,
``--password ...``, ``"password": "..."``) and the base64 chunks of a board's RUN (its body carries the
credentials and, with certificate auth, the client's private key). Which FILES can hold a secret is
declared in orchestrator/model/layout.py (SECRET_FILES); this is what the text of the others must not hold.
"""

from __future__ import annotations

import re

# the labels of the NSS key log format (TLS 1.2 and 1.3, ECH); any other *_SECRET label is caught as well
KEYLOG_LABELS = ("CLIENT_RANDOM", "RSA", "CLIENT_EARLY_TRAFFIC_SECRET", "EARLY_EXPORTER_SECRET",
                 "EARLY_EXPORTER_MASTER_SECRET", "CLIENT_HANDSHAKE_TRAFFIC_SECRET",
                 "SERVER_HANDSHAKE_TRAFFIC_SECRET", "CLIENT_TRAFFIC_SECRET_0", "SERVER_TRAFFIC_SECRET_0",
                 "EXPORTER_SECRET", "ECH_SECRET", "ECH_CONFIG")
KEYLOG_LINE = re.compile(r"\b(?:" + "|".join(KEYLOG_LABELS) + r"|[A-Z][A-Z0-9_]*_SECRET(?:_\d+)?)"
                         r"[ \t]+[0-9A-Fa-f]{16,}[ \t]+[0-9A-Fa-f]{16,}")
KEYLOG_PREFIX = re.compile(r"^(\W{0,3}KEYLOG\b).*$", re.MULTILINE)  # a board's line, "< KEYLOG ..."
PEM_KEY = re.compile(r"-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)",
                     re.DOTALL)
PEM_BODY_LINE = re.compile(r"^[A-Za-z0-9+/]{40,}={0,2}$", re.MULTILINE)  # a line of a key's base64 left alone
RUN_CHUNK = re.compile(r"\b(RUN CHUNK i=\d+) ([A-Za-z0-9+/=]+)")
PASSWORD_VALUE = re.compile(r"""(?ix)
    ( (?<![\w-])(?:password|passwd)["']?\s*[=:]\s*["']?   # password=..., "password": "...", passwd: ...
    | (?<![\w-])--password(?![\w-])(?:=|\s+) )            # --password VALUE (not --password-file)
    ([^\s"',;&]+)""")
REDACTED = "<redacted>"


def _keylog_line(m: re.Match[str]) -> str:
    return f"{m.group(0).split()[0]} {REDACTED}"


def redact(text: str) -> str:
    """``text`` with every key-log line, private key, password value and RUN chunk replaced by a marker."""
    if not text:
        return text
    text = PEM_KEY.sub(lambda m: f"-----BEGIN {m.group(1)}PRIVATE KEY----- {REDACTED}", text)
    text = RUN_CHUNK.sub(lambda m: f"{m.group(1)} {REDACTED} ({len(m.group(2))} base64 characters of the RUN body, "
                         "which carries the credentials)", text)
    text = KEYLOG_PREFIX.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = KEYLOG_LINE.sub(_keylog_line, text)
    text = PASSWORD_VALUE.sub(lambda m: f"{m.group(1)}{REDACTED}", text)
    return PEM_BODY_LINE.sub(REDACTED, text)


def redact_optional(text: str | None) -> str | None:
    return None if text is None else redact(text)
