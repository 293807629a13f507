"""Timing grids: which cells to measure, the padded-batch passes that measure them, assembly into a profile."""
