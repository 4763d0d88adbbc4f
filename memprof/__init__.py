"""memprof: where the memory of a tensor program goes, and what in-place ops save."""

__version__ = "0.1.0"


def __getattr__(name: str):
    """`memprof.profile(...)` and `@memprof.scenario(...)` without importing the engine early:
    both are modules that can be called (memprof/profile.py, memprof/scenario/__init__.py)."""
    if name in ("profile", "scenario"):
        import importlib

        return importlib.import_module(f"memprof.{name}")
    raise AttributeError(f"module 'memprof' has no attribute {name!r}")
