#!/usr/bin/env python3
"""Build mbedTLS 2.28 on this computer with the ESP32 firmware's user config file
(firmware/platformio/include/mbedtls_chacha_only.h), the way env esp32dev-chacha-only builds it on the board.
`--line 3.6`: mbedTLS 3.6 (Debian 13's source package, suite trixie of the same mirror) with
include/mbedtls3_chacha_only.h, the way env esp32dev-idf5-tls13 builds it (output build/mbedtls-chacha-only-3.6).

Source: Debian's source package `mbedtls` (2.28 on bookworm, the same release as ESP-IDF 4.4), fetched
with `apt-get source --download-only` through a private apt configuration in the output directory: the
machine's own apt sources with their `deb` entries turned into `deb-src`, nothing under /etc changed.
`--source-tarball FILE` uses a tarball of an mbedTLS 2.28 release instead (offline).

Output (default build/mbedtls-chacha-only): prefix/include, prefix/lib/libmbed{tls,x509,crypto}.a and
stamp.json. Cached: nothing is rebuilt while the stamp's hash of the inputs (source tarball, the user
config file, the cmake arguments) matches. Prints the prefix on success; exit 1 with a one-line reason
otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
FW_ROOT = HERE.parents[1]  # firmware/platformio
REPO = FW_ROOT.parents[1]
RECIPE = 1  # bump when the way of building changes


class Line:
    """One mbedTLS release line: its Debian suite (None: the machine's own), the user config, the output."""

    def __init__(self, version: str, suite: str | None, config: str, out: str) -> None:
        self.version, self.suite, self.out = version, suite, REPO / "build" / out
        self.user_config = FW_ROOT / "include" / config
        # The compile flags that make mbedTLS read the user config file - the same two as platformio.ini's env.
        self.cflags = f'-I{self.user_config.parent} -DMBEDTLS_USER_CONFIG_FILE=\\"{self.user_config.name}\\"'


LINES = {"2.28": Line("2.28", None, "mbedtls_chacha_only.h", "mbedtls-chacha-only"),
         "3.6": Line("3.6", "trixie", "mbedtls3_chacha_only.h", "mbedtls-chacha-only-3.6"),
         # the same with TLS 1.3 records unpadded (granularity 1), the variant measured beside the stock 16
         "3.6-pad1": Line("3.6", "trixie", "mbedtls3_padding1.h", "mbedtls-chacha-only-3.6-pad1")}
LINE = LINES["2.28"]  # main() sets the line asked for
USER_CONFIG = LINE.user_config
DEFAULT_OUT = LINE.out


class BuildError(Exception):
    pass


def cmake_args(prefix: Path) -> list[str]:
    return [
        "-DCMAKE_BUILD_TYPE=Release",
        f"-DCMAKE_INSTALL_PREFIX={prefix}",
        "-DENABLE_PROGRAMS=OFF",
        "-DENABLE_TESTING=OFF",
        "-DUSE_SHARED_MBEDTLS_LIBRARY=OFF",
        "-DUSE_STATIC_MBEDTLS_LIBRARY=ON",
        "-DMBEDTLS_FATAL_WARNINGS=OFF",
        "-DGEN_FILES=OFF",
        f"-DCMAKE_C_FLAGS={LINE.cflags}",
    ]


def run(argv: list[str], *, cwd: Path | None = None, what: str) -> str:
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
        raise BuildError(f"{what} failed ({proc.returncode}): " + " | ".join(tail))
    return proc.stdout


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ---- Debian source package through a private apt configuration --------------------------------------


def _deb_src_sources(etc_apt: Path) -> tuple[str, str]:
    """The machine's apt sources, `deb` turned into `deb-src` (one-line and deb822 formats)."""
    out: list[str] = []
    lists = [etc_apt / "sources.list", *sorted((etc_apt / "sources.list.d").glob("*.list"))]
    for path in lists:
        if not path.is_file():
            continue
        for line in path.read_text(errors="replace").splitlines():
            if re.match(r"^\s*deb\s", line):
                out.append(re.sub(r"^\s*deb\s", "deb-src ", line, count=1))
    stanzas: list[str] = []
    for path in sorted((etc_apt / "sources.list.d").glob("*.sources")):
        for stanza in re.split(r"\n\s*\n", path.read_text(errors="replace")):
            fields = [ln for ln in stanza.splitlines() if not ln.lstrip().startswith("#")]
            types = next((ln for ln in fields if ln.lower().startswith("types:")), None)
            enabled = next((ln for ln in fields if ln.lower().startswith("enabled:")), "enabled: yes")
            if types is None or "deb" not in types.split()[1:] or enabled.split(":", 1)[1].strip() == "no":
                continue
            stanzas.append("\n".join("Types: deb-src" if ln is types else ln for ln in fields))
    return "\n".join(out) + "\n", "\n\n".join(stanzas) + "\n"


def fetch_debian_source(work: Path) -> Path:
    """`apt-get source --download-only mbedtls` into work/dl; returns the upstream tarball."""
    if shutil.which("apt-get") is None:
        raise BuildError("apt-get not found: pass --source-tarball with an mbedTLS 2.28 release tarball")
    apt = work / "apt"
    for d in ("lists/partial", "cache/archives/partial", "parts"):
        (apt / d).mkdir(parents=True, exist_ok=True)
    one_line, deb822 = _deb_src_sources(Path("/etc/apt"))
    if LINE.suite is not None:  # another release: its suite from the same mirror, nothing else
        mirror = re.search(r"^deb-src\s+(?:\[[^\]]*\]\s+)?(\S+)", one_line, flags=re.M) or re.search(
            r"^URIs:\s*(\S+)", deb822, flags=re.M)
        if mirror is None:
            raise BuildError("no Debian mirror in /etc/apt/sources.list{,.d}")
        one_line, deb822 = f"deb-src {mirror.group(1)} {LINE.suite} main\n", ""
    (apt / "sources.list").write_text(one_line)
    (apt / "parts" / "deb-src.sources").write_text(deb822)
    opts = [
        "-o", f"Dir::Etc::SourceList={apt / 'sources.list'}",
        "-o", f"Dir::Etc::SourceParts={apt / 'parts'}",
        "-o", f"Dir::State::Lists={apt / 'lists'}",
        "-o", f"Dir::Cache={apt / 'cache'}",
        "-o", "Debug::NoLocking=1",
        "-o", "APT::Get::List-Cleanup=0",
    ]
    if os.geteuid() == 0:
        opts += ["-o", "APT::Sandbox::User=root"]  # the private directories are root's
    # A third-party repository without a Sources index only warns here; `apt-get source` decides.
    subprocess.run(["apt-get", *opts, "-q", "update"], capture_output=True, text=True, check=False)
    dl = work / "dl"
    if dl.exists():
        shutil.rmtree(dl)
    dl.mkdir()
    run(["apt-get", *opts, "-q", "source", "--download-only", "mbedtls"], cwd=dl,
        what="apt-get source --download-only mbedtls (needs Debian's package archive)")
    shutil.rmtree(apt, ignore_errors=True)  # the package lists (~20 MB) are not needed again
    tarballs = sorted(dl.glob("mbedtls_*.orig.tar.*"))
    if not tarballs:
        raise BuildError(f"apt-get source gave no mbedtls_*.orig.tar.*: {sorted(p.name for p in dl.iterdir())}")
    return tarballs[0]


def cached_tarball(work: Path) -> Path | None:
    found = sorted((work / "dl").glob("mbedtls_*.orig.tar.*")) if (work / "dl").is_dir() else []
    return found[0] if found else None


# ---- build -------------------------------------------------------------------------------------------


def extract(tarball: Path, dest: Path) -> Path:
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    with tarfile.open(tarball) as tf:
        if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4
            tf.extractall(dest, filter="data")
        else:
            tf.extractall(dest)  # noqa: S202 - Debian's checked source package
    roots = [p for p in dest.iterdir() if p.is_dir()]
    header = "config.h" if LINE.version == "2.28" else "build_info.h"  # where the version string is
    if len(roots) != 1 or not (roots[0] / "include" / "mbedtls" / header).is_file():
        raise BuildError(f"{tarball.name} is not an mbedTLS {LINE.version} source tree (no include/mbedtls/{header})")
    version_h = (roots[0] / "include" / "mbedtls" / ("version.h" if LINE.version == "2.28" else header)).read_text()
    m = re.search(r'#define\s+MBEDTLS_VERSION_STRING\s+"([0-9.]+)"', version_h)
    if not m or not m.group(1).startswith(LINE.version + "."):
        raise BuildError(f"{tarball.name}: mbedTLS {m.group(1) if m else '?'}, need {LINE.version}.x")
    return roots[0]


def build(out: Path, tarball: Path | None, jobs: int) -> tuple[Path, bool]:
    """Returns (prefix, rebuilt)."""
    out.mkdir(parents=True, exist_ok=True)
    prefix = out / "prefix"
    if tarball is None:
        tarball = cached_tarball(out) or fetch_debian_source(out)
    args = cmake_args(prefix)
    inputs = {
        "recipe": RECIPE,
        "tarball": tarball.name,
        "tarball_sha256": sha256(tarball),
        "user_config_sha256": sha256(LINE.user_config),
        "cmake_args": args,
    }
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()
    stamp = out / "stamp.json"
    libs = [prefix / "lib" / f"libmbed{n}.a" for n in ("tls", "x509", "crypto")]
    if stamp.is_file() and all(p.is_file() for p in libs):
        try:
            if json.loads(stamp.read_text()).get("digest") == digest:
                return prefix, False
        except ValueError:
            pass
    stamp.unlink(missing_ok=True)
    started = time.monotonic()
    src = extract(tarball, out / "source")
    bdir = out / "cmake-build"
    if bdir.exists():
        shutil.rmtree(bdir)
    if prefix.exists():
        shutil.rmtree(prefix)
    run(["cmake", "-S", str(src), "-B", str(bdir), *args], what="cmake configure of mbedTLS")
    run(["cmake", "--build", str(bdir), f"-j{jobs}"], what="cmake build of mbedTLS")
    run(["cmake", "--install", str(bdir)], what="cmake install of mbedTLS")
    missing = [str(p) for p in libs if not p.is_file()]
    if missing:
        raise BuildError(f"mbedTLS build did not produce {', '.join(missing)}")
    shutil.rmtree(src.parent, ignore_errors=True)  # the extracted tree (~30 MB); the tarball stays in dl/
    inputs["digest"] = digest
    inputs["build_seconds"] = round(time.monotonic() - started, 1)
    stamp.write_text(json.dumps(inputs, indent=2) + "\n")
    return prefix, True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--line", choices=sorted(LINES), default="2.28", help="the mbedTLS release line (default 2.28)")
    ap.add_argument("--out", type=Path, help="output directory (default build/mbedtls-chacha-only[-3.6])")
    ap.add_argument("--source-tarball", type=Path, help="an mbedTLS 2.28.x release tarball instead of apt")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 2)
    ns = ap.parse_args(argv)
    global LINE
    LINE = LINES[ns.line]
    for tool in ("cmake", "cc"):
        if shutil.which(tool) is None:
            print(f"build_mbedtls: error: {tool} not found (apt-get install -y cmake gcc)", file=sys.stderr)
            return 1
    try:
        prefix, rebuilt = build((ns.out or LINE.out).resolve(), ns.source_tarball, ns.jobs)
    except BuildError as e:
        print(f"build_mbedtls: error: {e}", file=sys.stderr)
        return 1
    print(f"build_mbedtls: {'built' if rebuilt else 'cached'} {prefix}", file=sys.stderr)
    print(prefix)
    return 0


if __name__ == "__main__":
    sys.exit(main())
