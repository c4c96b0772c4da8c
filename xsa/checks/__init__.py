"""The record checks, before any number is computed: one JSON Schema per kind of record (schemas,
run_schemas, schema_parts) with what relates two values of one record (relations), one run folder
checked whole (run_check), the record set a paper is built from (integrity), an adaptive study's ledger
(ledger), what the paper stage checks before any stage runs (paper_checks), and the records read back
(records) with every metric they hold (metrics)."""
