"""The drivers that clock the planner: the SimPy fleet, compiled and solo replicas, the routed fleet loop, closed-loop clients."""
