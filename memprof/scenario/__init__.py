"""Scenario files: the format (model.py), YAML with positions (loader.py), variants and `$param`
substitution (variants.py), the op and module catalog (catalog.py), checks (validate.py, with a
meta dry run in shapes.py), engine objects (build.py) and discovery (discover.py).
"""

from memprof.scenario.discover import discover
from memprof.scenario.validate import LoadedScenario, Variant, load_scenario, load_scenarios

__all__ = ["discover", "load_scenario", "load_scenarios", "LoadedScenario", "Variant"]
