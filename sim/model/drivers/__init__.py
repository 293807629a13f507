"""The drivers that clock the planner: the SimPy fleet and its replicas (the reference semantics), the fleet (one replica or several) in the compiled loop, closed-loop clients."""
