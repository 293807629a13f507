"""The engine model: the pure scheduler (planner), speculation policies, step time, acceptance,
KV capacity, workload, and the SimPy engine that drives the planner on a simulated clock."""
