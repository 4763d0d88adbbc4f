"""memprof: where the memory of a tensor program goes, and what in-place ops save."""

__version__ = "0.1.0"
