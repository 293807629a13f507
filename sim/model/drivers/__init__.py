"""The drivers that clock the planner: the SimPy fleet and its replicas (the reference semantics), a lone replica and the fleet in the compiled loop, closed-loop clients."""
