"""Scenario files: the format (model.py), YAML with positions (loader.py), variants and `$param`
substitution (variants.py), the op and module catalog (catalog.py), checks (validate.py, with a
meta dry run in shapes.py), engine objects (build.py) and discovery (discover.py).
"""

import sys as _sys
import types as _types

from memprof.scenario.discover import discover
from memprof.scenario.validate import LoadedScenario, Variant, load_scenario, load_scenarios

__all__ = ["discover", "load_scenario", "load_scenarios", "LoadedScenario", "Variant"]


class _ScenarioPackage(_types.ModuleType):
    """`@memprof.scenario(variants=...)` marks a function as a Python scenario
    (memprof/scenario/python_file.py); the package stays a package for everything else."""

    def __call__(self, fn=None, /, **options):
        from memprof.scenario.python_file import scenario

        if fn is None:
            return scenario(**options)
        return scenario(fn, **options)


_sys.modules[__name__].__class__ = _ScenarioPackage
