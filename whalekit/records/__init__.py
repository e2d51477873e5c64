"""The run records under results/: exporting and reading them, and which code made them (the run-code ledger)."""
