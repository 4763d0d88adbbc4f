"""The engine's layers read downward: autograd and the array kernels never import the ops."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parents[2] / "engine"


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


BELOW_OPS = sorted(
    [*(ENGINE / "autograd").glob("*.py"), ENGINE / "kernels.py", ENGINE / "tensor.py"]
    + [*(ENGINE / "allocator").rglob("*.py"), ENGINE / "storage.py"]
)


@pytest.mark.parametrize("path", BELOW_OPS, ids=lambda p: str(p.relative_to(ENGINE)))
def test_no_import_of_the_ops(path):
    bad = {n for n in _imports(path) if n == "engine.ops" or n.startswith("engine.ops.")}
    assert not bad, f"{path.relative_to(ENGINE)} imports {sorted(bad)} (the ops sit above it)"


def test_kernels_do_not_import_autograd():
    bad = {n for n in _imports(ENGINE / "kernels.py") if n.startswith("engine.autograd")}
    assert not bad
