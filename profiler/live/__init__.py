"""Live serving checks: load points against the real loop and the validation report."""
