"""Image builds, including an offline Debian base image when no registry is reachable.

Each image is tagged `testbed-<name>:latest` and labelled with a hash of its build inputs (their names as in the
checkout and their content, never where they lie); an image whose label matches is reused (unless rebuild=True),
so an unchanged tree builds nothing, and a checkout and an installed package of the same version reuse each
other's images. Each is built from a context staged in the cache folder holding exactly those inputs.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator import paths
from orchestrator.backends import docker
from orchestrator.backends.docker import inspect_image, inspect_images
from orchestrator.backends.process import run, which
from orchestrator.errors import TestbedError, ToolError
from orchestrator.paths import cache_dir

UPSTREAM_BASE = "debian:bookworm-slim"
LOCAL_BASE = "testbed-base:bookworm"
SUITES = ("bookworm", "trixie")  # Debian 12 (most images), 13 (mbedTLS 3.6 publisher, Mosquitto 2.0.21, RabbitMQ)
HASH_LABEL = "io.testbed.context-hash"
OWNED_LABEL = "io.testbed.owned"  # on every image we build (image_build_argv)
BASE_REPOSITORY = "testbed-base"  # the offline bases we import (build_local_base)


@dataclass(frozen=True)
class ImageSpec:
    name: str
    inputs: tuple[str, ...]  # files/folders named as in the checkout (paths.source) whose content defines the image
    suite: str = "bookworm"  # the Debian release of its base image
    on_demand: bool = False  # built when a cell first needs it (or named), not by a plain `testbed images build`

    @property
    def tag(self) -> str:
        return f"testbed-{self.name}:latest"

    @property
    def dockerfile(self) -> str:
        return f"images/{self.name}/Dockerfile"


IMAGES: tuple[ImageSpec, ...] = (
    ImageSpec("broker", ("images/broker",)),
    # Mosquitto 2.0.21 (Debian 13: libwebsockets, OpenSSL 3.5): the broker of the websocket transport's cells
    ImageSpec("broker-mosquitto-2.0.21", ("images/broker-mosquitto-2.0.21", "images/broker"), suite="trixie"),
    # RabbitMQ 4.0.5 and its MQTT plugin (Debian 13; TLS in Erlang/OTP's ssl): the broker of --broker rabbitmq, built
    # only when a cell needs it (measure/local.py), so that a cold build of the lab grows by nothing
    ImageSpec("broker-rabbitmq", ("images/broker-rabbitmq", "images/broker/healthcheck.sh"), suite="trixie",
              on_demand=True),
    ImageSpec("capture", ("images/capture",)),
    ImageSpec("subscriber", ("images/subscriber", "orchestrator/clients", "orchestrator/__init__.py")),
    ImageSpec("publisher", ("images/publisher", "firmware/platformio/lib", "firmware/platformio/host",
                            "firmware/platformio/test")),
    ImageSpec("netadmin", ("images/netadmin",)),  # the impairment helper (backends/impairment/helpers.py)
    # the virtual ESP32 on mbedTLS 3.6 (device_stack mbedtls-3.6): the same sources on Debian 13's libmbedtls-dev
    ImageSpec("publisher-mbedtls36", ("images/publisher-mbedtls36", "firmware/platformio/lib",
                                      "firmware/platformio/host", "firmware/platformio/test"), suite="trixie"),
)
# A lab host (tests/integration/labhosts.py): it copies from the publisher and subscriber images (a local tag in
# COPY --from, which the legacy builder and BuildKit's docker driver both take from the local store), so it is
# built after them and its inputs include theirs: a changed publisher or subscriber rebuilds it too.
IMAGES += (ImageSpec("labhost", ("images/labhost", *(i for s in IMAGES if s.name in ("publisher", "subscriber")
                                                     for i in s.inputs))),)


def spec(name: str) -> ImageSpec:
    for s in IMAGES:
        if s.name == name:
            return s
    raise TestbedError(f"unknown image {name!r}; known: {', '.join(s.name for s in IMAGES)}")


def buildable() -> list[ImageSpec]:
    """The images this tree can build: all in a checkout; an installed package carries no test-only image
    (labhost: tests/integration/labhosts.py)."""
    return [s for s in IMAGES if paths.source(s.dockerfile).is_file()]


def built_by_default() -> list[ImageSpec]:
    """What `testbed images build` without names builds (and doctor expects): the buildable ones but those built on
    demand (ImageSpec.on_demand)."""
    return [s for s in buildable() if not s.on_demand]


def _files(rel: str, root: Path | None) -> Iterable[tuple[str, Path]]:
    """(name as in the checkout, file) of one input: ``root``'s, or where paths.source finds it."""
    p = root / rel if root is not None else paths.source(rel)
    if p.is_file():
        yield rel, p
    elif p.is_dir():
        for f in sorted(p.rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts and "build" not in f.relative_to(p).parts[:1]:
                yield f"{rel}/{f.relative_to(p).as_posix()}", f


def input_files(s: ImageSpec, root: Path | None = None) -> list[tuple[str, Path]]:
    return [item for rel in s.inputs for item in _files(rel, root)]


def context_hash(s: ImageSpec, base_image: str, root: Path | None = None) -> str:
    h = hashlib.sha256(base_image.encode())
    for name, f in input_files(s, root):
        h.update(name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def stage_context(s: ImageSpec, dest: Path, wheelhouse: Path | None = None) -> Path:
    """``dest`` filled with the image's inputs under their names (and the wheelhouse as .cache/wheelhouse): the
    build context, the same from a checkout and from an installed package."""
    for name, f in input_files(s):
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, dest / name)
    if wheelhouse is not None:
        shutil.copytree(wheelhouse, dest / ".cache" / "wheelhouse")
    return dest


def image_label(tag: str, label: str) -> str | None:
    image = inspect_image(tag)
    return image.labels.get(label) if image is not None else None


def image_exists(tag: str) -> bool:
    return inspect_image(tag) is not None


def image_digest(tag: str) -> str | None:
    image = inspect_image(tag)
    return image.id if image is not None else None


def image_build_argv(s: ImageSpec, base_image: str, chash: str, root: Path) -> list[str]:
    return docker.build_argv(root / s.dockerfile, s.tag, root, build_args={"BASE_IMAGE": base_image},
                             labels={HASH_LABEL: chash, OWNED_LABEL: "true"})


# ---- the base image -------------------------------------------------------------------------

def parse_apt_mirror(texts: Iterable[str], suite: str = "bookworm") -> str | None:
    """The Debian mirror URL from apt sources (one-line or deb822 format) that serves ``suite``."""
    for text in texts:
        for line in text.splitlines():
            m = re.match(r"^\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", line)
            if m and m.group(2) == suite and "security" not in m.group(1):
                return m.group(1)
        for stanza in re.split(r"\n\s*\n", text):
            fields = dict(re.findall(r"^(\w[\w-]*):\s*(.+)$", stanza, flags=re.M))
            if "deb" in fields.get("Types", "").split() and suite in fields.get("Suites", "").split():
                uri = fields.get("URIs", "").split()
                if uri and "security" not in uri[0]:
                    return uri[0]
    return None


def machine_apt_mirror() -> str:
    texts = []
    for p in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]:
        if p.is_file():
            texts.append(p.read_text(errors="replace"))
    mirror = parse_apt_mirror(texts)
    if mirror is None:
        raise TestbedError("no Debian bookworm mirror found in /etc/apt/sources.list{,.d}",
                           hint="pass --mirror URL to `testbed images build`")
    return mirror


def debootstrap_argv(target: Path, mirror: str, suite: str = "bookworm") -> list[str]:
    return ["debootstrap", "--variant=minbase", "--include=ca-certificates", suite, str(target), mirror]


def resolve_base_image(progress: Callable[[str], None] = lambda _m: None, *, mirror: str | None = None,
                       rebuild: bool = False, suite: str = "bookworm") -> str:
    """debian:<suite>-slim when it is here or can be pulled, else a local debootstrap image."""
    upstream, local = f"debian:{suite}-slim", f"testbed-base:{suite}"
    if not rebuild:
        if image_exists(upstream):
            return upstream
        if image_exists(local):
            return local
        progress(f"pulling {upstream}")
        if run(docker.pull_argv(upstream), check=False, timeout=120).returncode == 0:
            return upstream
    progress(f"no registry: building {local} with debootstrap (about a minute)")
    build_local_base(mirror or machine_apt_mirror(), suite)
    return local


def build_local_base(mirror: str, suite: str = "bookworm") -> None:
    if which("debootstrap") is None:
        raise TestbedError("no container registry is reachable and debootstrap is missing",
                           hint="apt-get install -y debootstrap (make does this as root)")
    if os.geteuid() != 0:
        raise TestbedError("no container registry is reachable, and building the offline base image with "
                           "debootstrap needs root",
                           hint=f"once, as root: `sudo make images` (it builds testbed-base:{suite}; "
                           f"every docker-group user can then use it), or make debian:{suite}-slim pullable")
    cache_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="testbed-rootfs-", dir=cache_dir()) as tmp:
        rootfs = Path(tmp) / "rootfs"
        try:
            run(debootstrap_argv(rootfs, mirror, suite), timeout=900)
        except ToolError as exc:
            raise TestbedError(f"debootstrap from {mirror} failed", evidence=exc.evidence) from exc
        tarball = Path(tmp) / "rootfs.tar"
        run(["tar", "-C", str(rootfs), "-cf", str(tarball), "."], timeout=300)
        run(docker.import_argv(tarball, f"testbed-base:{suite}", changes=['CMD ["/bin/bash"]']), timeout=300)


# ---- wheelhouse for the subscriber image ------------------------------------------------------

def build_wheelhouse() -> Path:
    """paho-mqtt as a wheel in the cache's wheelhouse, for the subscriber image (our client modules are copied in as
    they are: images/subscriber/Dockerfile)."""
    wh = cache_dir() / "wheelhouse"
    wh.mkdir(parents=True, exist_ok=True)
    if not list(wh.glob("paho_mqtt-*.whl")):
        try:
            from importlib.metadata import version
            paho = f"paho-mqtt=={version('paho-mqtt')}"
        except Exception:  # noqa: BLE001 - any lookup failure: take the newest 2.x
            paho = "paho-mqtt>=2,<3"
        run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(wh),
             paho], timeout=300, hint="the subscriber image needs a paho-mqtt wheel from PyPI once")
    return wh


def _build_one(s: ImageSpec, base: str, chash: str, buildkit: str, progress: Callable[[str], None]) -> None:
    wheelhouse = None
    if s.name == "subscriber":
        progress("the wheelhouse (paho-mqtt)")
        wheelhouse = build_wheelhouse()
    progress(f"building {s.tag} on {base}")
    cache_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"testbed-context-{s.name}-", dir=cache_dir()) as tmp:
        context = stage_context(s, Path(tmp), wheelhouse)
        try:
            run(image_build_argv(s, base, chash, context), timeout=1800, env={"DOCKER_BUILDKIT": buildkit})
        except ToolError as exc:
            raise TestbedError(f"building {s.tag} failed", evidence=exc.evidence,
                               hint="`testbed images build --rebuild` retries from scratch") from exc


def build_images(names: Iterable[str] | None = None, *, rebuild: bool = False,
                 progress: Callable[[str], None] = lambda _m: None, mirror: str | None = None) -> dict[str, str]:
    """Build (or reuse) the images (none named: built_by_default()); returns tag -> 'built' | 'reused'."""
    wanted = [spec(n) for n in names] if names else built_by_default()
    bases = {suite: resolve_base_image(progress, mirror=mirror, suite=suite)
             for suite in SUITES if any(s.suite == suite for s in wanted)}
    # BuildKit needs the buildx component (Debian's docker.io 20.10 has none): use it only when present
    buildkit = "1" if run(docker.argv("buildx", "version"), check=False, timeout=30).returncode == 0 else "0"
    result: dict[str, str] = {}
    for s in wanted:
        base = bases[s.suite]
        chash = context_hash(s, base)
        if not rebuild and image_label(s.tag, HASH_LABEL) == chash:
            result[s.tag] = "reused"
            continue
        _build_one(s, base, chash, buildkit, progress)
        result[s.tag] = "built"
    return result


def build_on_demand(name: str, progress: Callable[[str], None] | None = None) -> bool:
    """Build image ``name`` when it is one built on demand (ImageSpec.on_demand) and this engine lacks it, on the same
    base and with the same identity as `testbed images build NAME` (which is what it runs); True when it built it.
    Its progress goes to stderr: a run's preflight has no status line yet, and a build takes minutes."""
    s = spec(name)
    if not s.on_demand or image_exists(s.tag):
        return False
    say = progress or (lambda m: print(f"testbed: {m}", file=sys.stderr, flush=True))
    say(f"{s.tag} is built when a cell first needs it: building it now (a few minutes, once)")
    build_images([name], progress=say)
    return True


def images_present(tags: Sequence[str]) -> set[str]:
    """Which of ``tags`` this engine has, in one `docker image inspect` (a sweep checks its images every cell)."""
    items = inspect_images(tags) if tags else []
    if len(items) == len(tags):  # every one found, however it was spelled
        return set(tags)
    named = {t for raw in items for t in raw.get("RepoTags") or []}
    return {t for t in tags if t in named}


def missing_images(names: Iterable[str]) -> list[str]:
    tags = [spec(n).tag for n in names]
    present = images_present(tags)
    return [t for t in tags if t not in present]


# ---- removing what we built -------------------------------------------------------------------

def _listed(*selection: str) -> list[str]:
    """`docker image ls` of ``selection``: each image by its tag, or by its id when it has none."""
    proc = run(docker.argv("image", "ls", "--format", "{{.ID}} {{.Repository}}:{{.Tag}}", *selection), timeout=60)
    names = []
    for line in proc.stdout.splitlines():
        image_id, _, tag = line.strip().partition(" ")
        names.append(image_id if not tag or "<none>" in tag else tag)
    return names


def owned_images() -> list[str]:
    """The images this tool made: those it built (labelled OWNED_LABEL, old builds' untagged ones included) and the
    offline base images it imported; never an image it pulled (debian:*-slim)."""
    return list(dict.fromkeys([*_listed("--filter", f"label={OWNED_LABEL}=true"), *_listed(BASE_REPOSITORY)]))


def prune_images() -> tuple[list[str], str]:
    """Remove owned_images(); (what was removed, docker's complaint about the rest: an image a container still
    uses is kept)."""
    names = owned_images()
    if not names:
        return [], ""
    proc = run(docker.argv("image", "rm", *names), check=False, timeout=300)
    left = set(owned_images())
    return [n for n in names if n not in left], proc.stderr.strip() if left else ""
