from pathlib import Path

from orchestrator.backends import images

REPO = Path(__file__).resolve().parents[2]

DEB822 = """Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.example.org/debian
Suites: bookworm bookworm-updates
Components: main

Types: deb
URIs: http://deb.example.org/debian-security
Suites: bookworm-security
"""


def test_mirror_from_deb822_sources():
    assert images.parse_apt_mirror([DEB822]) == "http://deb.example.org/debian"


def test_mirror_from_one_line_sources_skips_security():
    text = ("deb http://security.example.org/debian-security bookworm-security main\n"
            "deb [arch=amd64] http://mirror.example.org/debian bookworm main\n")
    assert images.parse_apt_mirror([text]) == "http://mirror.example.org/debian"


def test_no_mirror_is_none():
    assert images.parse_apt_mirror(["deb http://x/debian bullseye main\n"]) is None


def test_debootstrap_argv():
    assert images.debootstrap_argv(Path("/t/rootfs"), "http://m/debian") == [
        "debootstrap", "--variant=minbase", "--include=ca-certificates", "bookworm", "/t/rootfs", "http://m/debian"]


def test_build_argv_labels_hash_and_base(tmp_path):
    s = images.spec("broker")
    argv = images.image_build_argv(s, "testbed-base:bookworm", "abc", tmp_path)
    assert argv[:5] == ["docker", "build", "-f", str(tmp_path / "images/broker/Dockerfile"), "-t"]
    assert "BASE_IMAGE=testbed-base:bookworm" in argv and f"{images.HASH_LABEL}=abc" in argv
    assert argv[-1] == str(tmp_path)


def test_context_hash_follows_content(tmp_path):
    (tmp_path / "images" / "broker").mkdir(parents=True)
    f = tmp_path / "images" / "broker" / "Dockerfile"
    f.write_text("FROM x\n")
    s = images.spec("broker")
    h1 = images.context_hash(s, "base", tmp_path)
    assert images.context_hash(s, "base", tmp_path) == h1
    assert images.context_hash(s, "other-base", tmp_path) != h1
    f.write_text("FROM y\n")
    assert images.context_hash(s, "base", tmp_path) != h1


def _copied(dockerfile: str) -> list[str]:
    """The build-context sources of a Dockerfile's COPY lines (not those --from another image or stage)."""
    found = []
    for line in (REPO / dockerfile).read_text().splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
            found += [w for w in words[1:-1] if not w.startswith("--")]
    return found


def test_every_copied_file_is_an_input_and_the_staged_context_holds_them(tmp_path):
    """An image is built from a context staged with its inputs only (issue 44: the same from a checkout and an
    installed package): whatever its Dockerfile copies is among them (the subscriber's wheelhouse is staged apart)."""
    for s in images.IMAGES:
        for src in _copied(s.dockerfile):
            if src != ".cache/wheelhouse":
                assert any(src == i or src.startswith(i + "/") for i in s.inputs), (s.name, src)
    s = images.spec("publisher")
    staged = images.stage_context(s, tmp_path / "ctx")
    assert sorted(p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file()) == \
        sorted(name for name, _f in images.input_files(s)) != []
    for src in _copied(s.dockerfile):
        assert (staged / src).exists(), src
