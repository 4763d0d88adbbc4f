"""OpenBLAS's thread timeout, set before the engine's modules load numpy.

OpenBLAS's threads spin for 2**28 cycles (~0.1 s) after each product before they sleep (its
THREAD_TIMEOUT), holding a core the engine's own loops would take (kernels.pool_threads gives
them one thread meanwhile); told 4 (16 cycles), they sleep at once: the transformer step
46.3 -> 42.7 ms (its loops and copies on both threads), at the cost of waking them for each
product (the MLP step, 9 products in a row, ~0.3-0.7 ms slower in bench_training's runs).
Set before numpy loads OpenBLAS, it reads it then; else kernels._quiet_blas has it read again.
A value the user set is kept; kernels.BLAS_SPIN_S follows what OpenBLAS holds.
"""

import os
import sys

# whether OpenBLAS read, when it loaded, the value the environment holds from here on (numpy
# not loaded yet, or the user's own value)
TOLD = "numpy" not in sys.modules or "OPENBLAS_THREAD_TIMEOUT" in os.environ
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
