"""Reproduction: the committed records and the `make reproduce` run set that makes them.

Two layers live here. The records (`results`: export and read a run's record; `code_identity`:
which code a run executes, so a record is re-made only when that code changes) sit below
reporting, which reads them. The reproduction (`reproduce`, `reproduce_plan`, `run_set`,
`notebook_runner`, `code_equivalence`) sits above it, since it executes the notebooks that
draw the figures. Nothing a run executes imports this package (`tests/test_import_graph.py`).

    python -m whalekit.repro.reproduce --preset cpu --dry-run   # what is recorded, what is left
"""
