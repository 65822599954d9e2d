#!/usr/bin/env python3
"""Debian 13's mbedTLS 3.6 development files on this Debian 12 computer, for a host build of the core on 3.6.

`apt-get download libmbedtls-dev` from suite trixie of the machine's own Debian mirror (read from its apt
sources at run time), through a private apt configuration in the output directory (nothing under /etc
changed), then `dpkg-deb -x` into OUT/root. The package ships the static libraries (libmbed{tls,x509,crypto}.a),
so the programs link without Debian 13's shared libraries and run on Debian 12's C library.
The same package is what images/publisher-mbedtls36 builds with (there: apt-get install on a Debian 13 base).

Output (default build/mbedtls-3.6): root/usr/include, root/usr/lib/<triplet>/libmbed*.a, stamp.json. Cached:
nothing is fetched again while the stamp names the unpacked .deb; prints the CMake arguments that point the
host build at it (one per line) on success; exit 1 with a one-line reason otherwise.
  cmake -S firmware/platformio/host -B build/fw-host-36 $(python3 fetch_debian_mbedtls.py)
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
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[3]
DEFAULT_OUT = REPO / "build" / "mbedtls-3.6"
SUITE = "trixie"
PACKAGE = "libmbedtls-dev"


class FetchError(Exception):
    pass


def machine_mirror(etc_apt: Path = Path("/etc/apt")) -> str:
    """The Debian archive URL of the machine's apt sources (not the security archive)."""
    texts = [p.read_text(errors="replace") for p in
             [etc_apt / "sources.list", *sorted((etc_apt / "sources.list.d").glob("*"))] if p.is_file()]
    for text in texts:
        for m in re.finditer(r"^\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+\S+", text, flags=re.M):
            if "security" not in m.group(1):
                return m.group(1)
        for m in re.finditer(r"^URIs:\s*(\S+)", text, flags=re.M):
            if "security" not in m.group(1):
                return m.group(1)
    raise FetchError("no Debian mirror in /etc/apt/sources.list{,.d}")


def run(argv: list[str], what: str, cwd: Path | None = None) -> str:
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
        raise FetchError(f"{what} failed ({proc.returncode}): " + " | ".join(tail))
    return proc.stdout


def download(out: Path) -> Path:
    apt = out / "apt"
    for d in ("lists/partial", "cache/archives/partial", "parts"):
        (apt / d).mkdir(parents=True, exist_ok=True)
    (apt / "sources.list").write_text(f"deb {machine_mirror()} {SUITE} main\n")
    opts = ["-o", f"Dir::Etc::SourceList={apt / 'sources.list'}", "-o", f"Dir::Etc::SourceParts={apt / 'parts'}",
            "-o", f"Dir::State::Lists={apt / 'lists'}", "-o", f"Dir::Cache={apt / 'cache'}",
            "-o", "Debug::NoLocking=1"]
    if os.geteuid() == 0:
        opts += ["-o", "APT::Sandbox::User=root"]  # the private directories are root's
    run(["apt-get", *opts, "-q", "update"], f"apt-get update of Debian {SUITE}")
    dl = out / "dl"
    shutil.rmtree(dl, ignore_errors=True)
    dl.mkdir()
    run(["apt-get", *opts, "-q", "download", PACKAGE], f"apt-get download {PACKAGE} ({SUITE})", cwd=dl)
    shutil.rmtree(apt, ignore_errors=True)  # the package lists are not needed again
    debs = sorted(dl.glob(f"{PACKAGE}_*.deb"))
    if not debs:
        raise FetchError(f"apt-get download gave no {PACKAGE}_*.deb")
    return debs[0]


def unpacked(out: Path) -> Path:
    """OUT/root with the package's files; fetched and unpacked only when the stamp does not match."""
    root, stamp = out / "root", out / "stamp.json"
    cached = sorted((out / "dl").glob(f"{PACKAGE}_*.deb")) if (out / "dl").is_dir() else []
    if cached and stamp.is_file() and (root / "usr" / "include" / "mbedtls" / "build_info.h").is_file():
        try:
            if json.loads(stamp.read_text()).get("deb") == cached[0].name:
                return root
        except ValueError:
            pass
    out.mkdir(parents=True, exist_ok=True)
    deb = download(out)
    shutil.rmtree(root, ignore_errors=True)
    run(["dpkg-deb", "-x", str(deb), str(root)], f"dpkg-deb -x {deb.name}")
    version_h = root / "usr" / "include" / "mbedtls" / "build_info.h"
    text = version_h.read_text() if version_h.is_file() else ""
    m = re.search(r'#define\s+MBEDTLS_VERSION_STRING\s+"([0-9.]+)"', text)
    if not m or not m.group(1).startswith("3.6."):
        raise FetchError(f"{deb.name}: mbedTLS {m.group(1) if m else '?'}, need 3.6.x")
    digest = hashlib.sha256(deb.read_bytes()).hexdigest()
    stamp.write_text(json.dumps({"deb": deb.name, "sha256": digest, "mbedtls": m.group(1)}, indent=2) + "\n")
    return root


def cmake_args(root: Path) -> list[str]:
    libs = sorted(root.glob("usr/lib/*/libmbedtls.a"))
    if not libs:
        raise FetchError(f"{root}: no usr/lib/<triplet>/libmbedtls.a in the package")
    lib = libs[0].parent
    return [f"-DMBEDTLS_INCLUDE_DIR={root / 'usr' / 'include'}", f"-DMBEDTLS_LIB={lib / 'libmbedtls.a'}",
            f"-DMBEDX509_LIB={lib / 'libmbedx509.a'}", f"-DMBEDCRYPTO_LIB={lib / 'libmbedcrypto.a'}"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output directory (default {DEFAULT_OUT})")
    ns = ap.parse_args(argv)
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            print(f"fetch_debian_mbedtls: error: {tool} not found (a Debian system is needed)", file=sys.stderr)
            return 1
    try:
        print("\n".join(cmake_args(unpacked(ns.out.resolve()))))
    except FetchError as e:
        print(f"fetch_debian_mbedtls: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
