"""Every default of a device option is device_options.def's alone (issue 39): the core's one DeviceConfig
(device_config.h) is generated from the .def and PublishConfig (publisher.h) is built from it, so no C++ of the
device programs gives a field or variable named after a .def option a default of its own (as vdevice's Options,
the board's RunRequest and PublishConfig did: session_expiry_s 3600 in one, 0 in another). These tests read the
C++ sources (comments and preprocessor lines left out)."""

from __future__ import annotations

import re
from pathlib import Path

from device_options_def import read_def
from fwtest_support import FIRMWARE

# The device programs' sources: the core, the host programs (not the probes: test tools with their own command
# lines) and the ESP32 application.
SOURCES = ("lib/testbed_core/src", "host/src", "src")
_LITERAL = r'(?:-?\d[\w.]*|"(?:[^"\\]|\\.)*"|true|false|nullptr|[A-Za-z_]\w*::[A-Za-z_]\w*)'
_DECLARATION = re.compile(
    r"(?:^|[;{}(,])\s*(?:(?:static|const|constexpr|inline|volatile|unsigned|signed)\s+)*[A-Za-z_][\w:<>]*"
    r"(?:\s*[*&])*\s+(?:[*&]\s*)?(\w+)\s*(?:=\s*(" + _LITERAL + r")\s*[;,)]|\{\s*(" + _LITERAL + r")?\s*\}\s*;)",
    re.M)
_UNSET = {None, "0", "0.0", '""', "false", "nullptr"}  # "nothing yet", no default
# Names that are a .def option's but mean something else where they are initialised, each with why.
ALLOWED = {
    ("host/src/board_emu/board_emu_main.cpp", "seed"): "board-emu's own --seed (its jitter and sensors)",
    ("host/src/vdevice/vdevice_main.cpp", "mode"): "a file's permission bits (LineFile::open)",
}


def _code(path: Path) -> str:
    text = re.sub(r"//[^\n]*|/\*.*?\*/", "", path.read_text(), flags=re.S)
    return re.sub(r"^\s*#[^\n]*", "", text, flags=re.M)


def restated_defaults(firmware: Path = FIRMWARE) -> list[tuple[str, str, str]]:
    """(file, name, literal) of every declaration that gives a .def option's name a literal other than an unset one."""
    names = {o.name for o in read_def(firmware / "lib/testbed_core/src/device_options.def")}
    found = []
    for folder in SOURCES:
        for path in sorted((firmware / folder).rglob("*")):
            if path.suffix not in (".h", ".cpp") or "probes" in path.parts:
                continue
            rel = str(path.relative_to(firmware))
            for m in _DECLARATION.finditer(_code(path)):
                literal = m.group(2) if m.group(2) is not None else m.group(3)
                if m.group(1) in names and literal not in _UNSET and (rel, m.group(1)) not in ALLOWED:
                    found.append((rel, m.group(1), literal))
    return found


def test_no_option_default_is_restated_in_the_cpp() -> None:
    assert restated_defaults() == []


def test_the_scan_finds_a_restated_default(tmp_path: Path) -> None:
    """What the scan catches: the old board RunRequest's session_expiry_s, an enum default, a brace initialiser."""
    src = tmp_path / "lib/testbed_core/src"
    src.mkdir(parents=True)
    (src / "device_options.def").write_text((FIRMWARE / "lib/testbed_core/src/device_options.def").read_text())
    (src / "x.h").write_text("struct RunRequest {\n  uint32_t session_expiry_s = 3600;  // MQTT 5\n"
                             "  CloseMode close = CloseMode::Disconnect;\n  uint16_t inflight{1};\n"
                             "  const char* host = nullptr;\n  uint32_t samples{};\n};\n")
    assert restated_defaults(tmp_path) == [("lib/testbed_core/src/x.h", "session_expiry_s", "3600"),
                                           ("lib/testbed_core/src/x.h", "close", "CloseMode::Disconnect"),
                                           ("lib/testbed_core/src/x.h", "inflight", "1")]


def _members(header: str, struct: str) -> list[str]:
    """The declarations at the top level of `struct NAME { ... };` in a core header."""
    text = _code(FIRMWARE / "lib/testbed_core/src" / header)
    start = text.index(f"struct {struct} {{") + len(f"struct {struct} {{")
    depth, top, i = 1, [], start
    while depth:
        c = text[i]
        depth += (c == "{") - (c == "}")
        if depth == 1 and c != "}":
            top.append(c)
        i += 1
    return [s.strip() for s in "".join(top).split(";") if s.strip()]


def test_device_config_and_publish_config_have_no_initialiser_of_their_own() -> None:
    """DeviceConfig's fields come from the .def by the X-macro; PublishConfig's from DeviceConfig in its constructor:
    neither has a default member initialiser (its static constants are not options)."""
    for header, struct in (("device_config.h", "DeviceConfig"), ("publisher.h", "PublishConfig")):
        members = _members(header, struct)
        assert members, struct
        assert [m for m in members if ("=" in m or "{" in m) and not m.startswith("static constexpr")
                and "(" not in m] == [], struct
