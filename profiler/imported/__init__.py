"""Imported timing and acceptance: aiconfigurator kernels, vLLM metrics and logs, published tables (no torch)."""
