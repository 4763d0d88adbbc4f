"""Reports: the JSON document a run produces, how it is stored, and how it is rendered."""
