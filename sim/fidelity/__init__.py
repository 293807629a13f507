"""Fidelity: the simulator's predictions against measured serving (live runs, vLLM benchmarks)."""
