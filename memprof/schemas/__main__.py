"""`python -m memprof.schemas`: regenerate the shipped JSON Schemas from the pydantic models."""

from memprof.schemas import write_all

for path in write_all():
    print(path)
