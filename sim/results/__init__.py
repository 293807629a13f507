"""Results: per-request and per-step records, metrics over them, cost, and the runner that
turns a scenario into its summary table."""
