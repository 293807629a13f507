"""The drivers that clock the planner: the SimPy fleet and its replicas (the reference semantics), the compiled fleet loop, closed-loop clients."""
