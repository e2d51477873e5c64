"""Not kept in this record (whalekit.results): a record keeps the source of the harnesses the run evaluated on test and their lineage; the run directory has every candidate's."""
