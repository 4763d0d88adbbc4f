"""engine/tensor.pyi, the Tensor stub editors and type checkers read, is in sync with the op table.

Tensor's op methods are bound at import from engine/ops/registry.py; the stub is generated from
the class as it is then (`python -m engine.ops.stub`). After adding an op, regenerate it, as the
JSON Schemas are regenerated (memprof/schemas/__main__.py).
"""

from __future__ import annotations

import ast
import subprocess
import sys

from engine.ops import registry, stub


def _stub_methods() -> set[str]:
    tree = ast.parse(stub.STUB.read_text())
    [cls] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Tensor"]
    return {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}


def test_the_shipped_stub_is_generated_from_the_op_table():
    assert stub.STUB.read_text() == stub.render(), (
        "engine/tensor.pyi is out of date: run `python -m engine.ops.stub`"
    )


def test_every_method_row_is_in_the_stub():
    assert set(registry.methods()) <= _stub_methods()


def test_the_check_command_exits_1_when_out_of_date(tmp_path, monkeypatch):
    stale = tmp_path / "tensor.pyi"
    stale.write_text("class Tensor: ...\n")
    monkeypatch.setattr(stub, "STUB", stale)
    assert stub.main(["--check"]) == 1
    assert stub.main([]) == 0 and stale.read_text() == stub.render()
    assert stub.main(["--check"]) == 0


def test_the_stub_is_what_a_fresh_interpreter_generates():
    """Rendering does not depend on what else the process imported (engine.nn, ...)."""
    code = "from engine.ops import stub; import sys; sys.stdout.write(stub.render())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == stub.STUB.read_text()
