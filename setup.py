"""The optional compiled part of the engine (engine/_native.c); everything else is in
pyproject.toml. The extension is optional: where it cannot be built (no compiler, no Python
headers) the install goes on and engine.kernels uses its numpy forms, which give the same bits."""

import sys

from setuptools import Extension, setup

# IEEE double arithmetic as numpy does it: no fused multiply-adds, no reassociation
ARGS = [] if sys.platform == "win32" else ["-O3", "-ffp-contract=off", "-fno-fast-math"]

setup(
    ext_modules=[
        Extension("engine._native", ["engine/_native.c"], extra_compile_args=ARGS, optional=True)
    ]
)
