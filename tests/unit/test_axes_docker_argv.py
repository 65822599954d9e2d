"""Every docker command line is built by orchestrator/backends/docker.py: one argv builder per docker noun
(``exec_argv``, ``run_argv``, ``build_argv``, ``pull_argv``, ``import_argv``; ``argv`` for the engine's own
queries). The test reads orchestrator/ (AST) and fails on a list or tuple that spells ``"docker"`` as a program
elsewhere (first, or before a docker noun), or on a string that starts a ``docker NOUN`` command line."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from orchestrator.backends import docker

ROOT = Path(__file__).resolve().parents[2] / "orchestrator"
BUILDER = ROOT / "backends" / "docker.py"
NOUNS = ("exec", "run", "build", "pull", "import", "rm", "kill", "ps", "inspect", "image", "network", "volume",
         "buildx", "compose", "version", "info", "cp", "logs", "start", "stop", "create")
# a shell command line in a string ("docker compose v2" is a name, not a command: compose.py runs compose)
COMMAND_TEXT = re.compile(rf"(^|[;&|]\s*|\$\()docker\s+({'|'.join(n for n in NOUNS if n != 'compose')})\b")


def hand_built(source: str, where: str) -> list[str]:
    tree = ast.parse(source)
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.List | ast.Tuple):
            words = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            pairs = zip(words, words[1:], strict=False)
            if words[:1] == ["docker"] or any(a == "docker" and b in NOUNS for a, b in pairs):
                found.append(f"{where}:{node.lineno}: {ast.get_source_segment(source, node)}"[:160])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings \
                and COMMAND_TEXT.search(node.value):
            found.append(f"{where}:{node.lineno}: {node.value!r}"[:160])
    return found


def test_no_docker_argv_is_built_by_hand_outside_the_docker_backend() -> None:
    found = [hit for path in sorted(ROOT.rglob("*.py")) if path != BUILDER
             for hit in hand_built(path.read_text(), str(path.relative_to(ROOT.parent)))]
    assert not found, "docker argv built by hand (use backends/docker.py's builders):\n" + "\n".join(found)


def test_the_scan_finds_what_it_looks_for() -> None:
    source = ('a = ["docker", "exec", h, "ip"]\nb = ("sudo", "docker", "run", i)\nc = ["docker", *rest]\n'
              'd = ["sh", "-c", "docker ps -q | xargs docker rm"]\ne = ["dockerd", "docker"]\n'
              'def f():\n    """Runs docker exec in the helper."""\n')
    assert [h.split(":")[1] for h in hand_built(source, "m")] == ["1", "2", "3", "4"]


def test_the_builders_spell_what_they_did_by_hand() -> None:
    assert docker.exec_argv("h", "ip", "route", detach=True) == ["docker", "exec", "-d", "h", "ip", "route"]
    assert docker.exec_argv("h", "sh", stdin=True) == ["docker", "exec", "-i", "h", "sh"]
    assert docker.run_argv("img", "x", options=["--network", "none"]) == [
        "docker", "run", "--rm", "--network", "none", "img", "x"]
    assert docker.run_argv("img", options=["-d", "--name", "n"], remove=False) == [
        "docker", "run", "-d", "--name", "n", "img"]
    assert docker.build_argv(Path("ctx/Dockerfile"), "t:1", Path("ctx"), build_args={"A": "1"},
                             labels={"k": "v", "o": "true"}) == [
        "docker", "build", "-f", "ctx/Dockerfile", "-t", "t:1", "--build-arg", "A=1", "--label", "k=v",
        "--label", "o=true", "ctx"]
    assert docker.import_argv(Path("r.tar"), "b:1", changes=['CMD ["/bin/bash"]']) == [
        "docker", "import", "--change", 'CMD ["/bin/bash"]', "r.tar", "b:1"]
    assert docker.pull_argv("u") == ["docker", "pull", "-q", "u"]
