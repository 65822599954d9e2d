"""No device program's usage text writes an option's default, range or choices a second time (issue 39): a
device_options.def option's are the .def's, and `--help`'s list is generated from it (options.cpp
options_help); board-emu's own options' defaults are the initialisers of its options struct, which its usage
asks (std::to_string(d.seed)). These tests read the usage text as the C++ writes it: every expression whose
first string literal starts with "usage: ", its literals joined (a piece of code between them, as
std::to_string(...), is not text written twice), and the programs' --help as they print it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from device_options_def import DefOption, read_def
from fwtest_support import FIRMWARE, HostBuild
from test_device_config_defaults import _DECLARATION, _UNSET, _code

from orchestrator.publishers.board.protocol_def import default

HOST_SOURCES = "host/src"
CODE = "\x00"  # what stands for a piece of code between a usage's literals
_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|//[^\n]*|/\*.*?\*/|\'(?:[^\'\\\n]|\\.)*\'|;|\s+|.', re.S)
_FLAG = re.compile(r"--([a-z][a-z0-9]*(?:-[a-z0-9]+)*)")


def _unescape(literal: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), literal[1:-1])


def usage_texts(source: str) -> list[str]:
    """Each usage expression of a C++ source: from a string literal starting "usage: " to its statement's `;`, the
    literals' text, each run of code between them as CODE."""
    tokens = [t for t in _TOKEN.findall(source) if not t.isspace() and not t.startswith(("//", "/*"))]
    texts = []
    for i, token in enumerate(tokens):
        if not (token.startswith('"') and _unescape(token).startswith("usage: ")):
            continue
        pieces: list[str] = []
        for t in tokens[i:]:
            if t == ";":
                break
            if t.startswith('"'):
                pieces.append(_unescape(t))
            elif not pieces or pieces[-1] != CODE:
                pieces.append(CODE)
        texts.append("".join(pieces))
    return texts


def _default_patterns(value: str, *, parenthesised: bool) -> list[str]:
    """How usage text states a default: "(65", "(f: ...", "default TLS_...". An enum's "(persistent: ..." explains a
    choice, so only its "default X" counts."""
    v = re.escape(value) + r"(?![\w.])"
    return ([r"\(\s*" + v] if parenthesised else []) + [r"\bdefault:?\s+" + v]


def _def_facts(option: DefOption) -> list[tuple[str, str]]:
    """(what, regex) of what a usage text must not restate of a .def option: its range (or the values of a short one,
    "0|1|2"), its choices, its default."""
    facts = []
    if option.kind in ("uint", "ms"):
        facts.append((f"range {option.min}..{option.max}", re.escape(f"{option.min}..{option.max}")))
        if option.kind == "uint" and isinstance(option.max, int) and isinstance(option.min, int) \
                and option.max - option.min <= 9:
            values = "|".join(str(v) for v in range(option.min, option.max + 1))
            facts.append((f"values {values}", re.escape(values)))
    if option.choices:
        facts.append((f"choices {'|'.join(option.choices)}", re.escape("|".join(option.choices))))
    value = default(option)
    if value is not None:
        facts += [(f"default {value}", p) for p in _default_patterns(str(value), parenthesised=option.kind != "enum")]
    return facts


def _own_defaults(code: str) -> dict[str, str]:
    """The file's own options' defaults: every declaration with a literal initialiser, by name (board-emu's
    EmuOptions: rx_buffer 256, seed 1, boot_ms 200)."""
    found = {}
    for m in _DECLARATION.finditer(code):
        literal = m.group(2) if m.group(2) is not None else m.group(3)
        if literal not in _UNSET:
            found[m.group(1)] = literal.strip('"')
    return found


def restated_in_usage(firmware: Path = FIRMWARE) -> list[tuple[str, str, str]]:
    """(file, flag, what) of every default, range or choice list of an option that a usage text writes itself."""
    options = {o.name: o for o in read_def(firmware / "lib/testbed_core/src/device_options.def")}
    found = []
    for path in sorted((firmware / HOST_SOURCES).rglob("*.cpp")):
        rel = str(path.relative_to(firmware))
        source = path.read_text()
        own = _own_defaults(_code(path))
        for text in usage_texts(source):
            for m in _FLAG.finditer(text):
                name = m.group(1).replace("-", "_")
                end = text.find("--", m.end())
                segment = text[m.end():end if end >= 0 else len(text)]
                facts = _def_facts(options[name]) if name in options else []
                if name in own:
                    facts += [(f"default {own[name]}", p) for p in _default_patterns(own[name], parenthesised=True)]
                for what, pattern in facts:
                    if re.search(pattern, segment, re.I) and (rel, m.group(0), what) not in found:
                        found.append((rel, m.group(0), what))
    return found


def test_no_usage_text_restates_a_default() -> None:
    assert restated_in_usage() == []


PLANTED = r'''
struct EmuOptions {
  uint32_t boot_ms = 200;
  uint64_t seed = 1;
};
const char kOld[] = "usage: old [options]\n"
    "  --payload BYTES (65) --qos 0|1|2 --close disconnect|drop (disconnect: MQTT DISCONNECT)\n"
    "  --devices N (1..1000000) --device-prefix P (f: device i's id) --boot-ms N (200)\n"
    "  --ciphers LIST (IANA names; default TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256)\n";
std::string usage() {
  const EmuOptions d;
  return "usage: new [options]\n  --seed N (" + std::to_string(d.seed) + ")  --boot-ms N (" +
         std::to_string(d.boot_ms) + ") --connection MODE (persistent: one connection) --sleep-ms MS (the sleep;\n"
         " 0: one interval) --payload BYTES (650 is fine)\n" + options_help(TB_VDEVICE);
}
'''


def test_the_scan_finds_a_restated_default(tmp_path: Path) -> None:
    """What the scan catches: db8fc42's usage lines (a .def default, range, choices, a text default, board-emu's own
    default); what it lets through: a default the code asks for, an enum choice explained, a value's meaning."""
    src = tmp_path / "lib/testbed_core/src"
    src.mkdir(parents=True)
    (src / "device_options.def").write_text((FIRMWARE / "lib/testbed_core/src/device_options.def").read_text())
    (tmp_path / HOST_SOURCES).mkdir(parents=True)
    (tmp_path / HOST_SOURCES / "x.cpp").write_text(PLANTED)
    assert restated_in_usage(tmp_path) == [
        ("host/src/x.cpp", "--payload", "default 65"), ("host/src/x.cpp", "--qos", "values 0|1|2"),
        ("host/src/x.cpp", "--close", "choices disconnect|drop"), ("host/src/x.cpp", "--devices", "range 1..1000000"),
        ("host/src/x.cpp", "--device-prefix", "default f"), ("host/src/x.cpp", "--boot-ms", "default 200"),
        ("host/src/x.cpp", "--ciphers", "default TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256")]


def _listed(help_text: str) -> str:
    """--help's generated list (after its "All options" line), one line."""
    return " ".join(help_text.split("All options", 1)[1].split("\n", 1)[1].split())


def test_help_lists_every_range_choice_and_default_from_the_def(host_build: HostBuild) -> None:
    """The usage text leaves them to --help's list: every option the program takes, with its range or choices and
    its default, as the .def has them."""
    for program, bit in (("vdevice", "vdevice"), ("fleet", "fleet")):
        help_text = subprocess.run([str(host_build.build_dir / program), "--help"], capture_output=True, text=True,
                                   check=True).stdout
        expected = []
        for o in read_def():
            if bit not in o.programs:
                continue
            item = "--" + o.name.replace("_", "-")
            if o.kind in ("uint", "ms"):
                item += f" {o.min}..{o.max}"
            if o.choices:
                item += " " + "|".join(o.choices)
            value = default(o) if o.kind != "flag" else None  # a flag: given or not
            expected.append(item + (f" ({value})" if value is not None else ""))
        assert _listed(help_text) == " ".join(expected), program
