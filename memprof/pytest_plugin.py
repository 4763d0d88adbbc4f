"""pytest plugin (entry point `pytest11`): memory budgets for tests. See docs/ci.md."""
