"""The optional compiled part of the engine (engine/_native.c); everything else is in
pyproject.toml. The extension is optional: where it cannot be built (no compiler, no Python
headers) the install goes on and engine.kernels uses its numpy forms, which give the same bits."""

import sys

from setuptools import Extension, setup

# IEEE double arithmetic as numpy does it: no fused multiply-adds, no reassociation. Python's
# own CFLAGS carry -fwrapv, which keeps gcc from vectorizing the max-pool lanes (2.3 ms -> 1.0 ms
# for 2x2 windows over 1M float32); the loops do no signed arithmetic that could overflow.
ARGS = (
    [] if sys.platform == "win32" else ["-O3", "-fno-wrapv", "-ffp-contract=off", "-fno-fast-math"]
)

setup(
    ext_modules=[
        Extension("engine._native", ["engine/_native.c"], extra_compile_args=ARGS, optional=True)
    ]
)
