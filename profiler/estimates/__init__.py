"""Roofline estimates from a model's shape and a GPU's datasheet (no torch)."""
