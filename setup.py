"""The packages of the wheel: orchestrator* and, as its package data orchestrator/_tree, the tree a run needs (the
checkout's compose/, images/, firmware/ and playbooks/, mapped, not copied: orchestrator/paths.py reads them there).
Everything else is in pyproject.toml, which says which of the tree's files go."""

from setuptools import find_packages, setup

TREE = ("compose", "images", "firmware", "playbooks")

setup(packages=[*find_packages(include=["orchestrator*"]), *(f"orchestrator._tree.{d}" for d in TREE)],
      package_dir={f"orchestrator._tree.{d}": d for d in TREE})
