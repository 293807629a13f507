"""Decisions: break-even, capacity, sweeps, decision rules, policy advice and bottlenecks, built
on the simulator's results."""
