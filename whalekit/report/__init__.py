"""Reporting: what the runs wrote, read back as tables, figures, verdicts and the trace viewer.

Above the core and the records (`whalekit.records.results`), below the reproduction; nothing a
run executes imports it (`tests/test_import_graph.py`, `tests/test_code_identity.py`), so an
edit here never invalidates a committed record.

    python -m whalekit.report.figures --preset cpu     # every figure and table from results/
    python -m whalekit.report.verdicts --preset cpu    # docs/results.md
"""
