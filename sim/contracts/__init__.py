"""Contracts: what flows into the simulator, loaded from TOML/JSON and validated at the boundary
(scenario, calibration profile, trace, grids, input errors)."""
