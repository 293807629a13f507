"""Decisions: the one decision every surface renders (facts, decision, answer), break-even,
capacity, sweeps, policy advice and bottlenecks, built on the simulator's results."""
