"""The folder layout is the architecture: model/ stays pure."""

import ast
from pathlib import Path

MODEL = Path(__file__).resolve().parents[2] / "orchestrator" / "model"
FORBIDDEN = {"docker", "ansible_runner", "pyshark", "subprocess"}


def test_model_imports_nothing_from_the_outside_world():
    offenders = []
    for py in MODEL.glob("*.py"):
        for node in ast.walk(ast.parse(py.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{py.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN]
    assert offenders == []
