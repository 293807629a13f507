"""Compile every kernel into the on-disk cache once (``make setup`` runs ``python -m
sim.model.drivers.warm_kernels``), so the first simulation does not wait for numba."""

from __future__ import annotations

import numpy as np

from sim.model.speculation import SpeculationPolicy
from sim.model.step_plan import Request


def warm() -> None:
    """Compile every kernel into the on-disk cache (``make setup`` runs this once, so the first
    simulation does not wait ~10 s for numba): tiny fleets, one each way of running (the fleet
    kernel with one replica, two, a restart, one at 0 s, the adaptive policy; step by step on
    SimPy: a timer only Python runs)."""
    from sim.contracts.fleet_config import RestartConfig
    from sim.contracts.synthetic import synthetic_profile
    from sim.model.drivers.engine import Fleet, FleetSpec
    from sim.model.step_plan import SchedulerConfig
    from sim.model.step_time import ProfileStepTimer

    # short limits, so queue-time rejections and timeouts of waiting and running requests happen
    cfg = SchedulerConfig.of(max_num_seqs=4, max_num_batched_tokens=64, block_size=16, kv_blocks=64,
                          max_queue_time_s=0.05)
    fixed = SpeculationPolicy("off_above_batch", k=2, max_batch=2)
    adaptive = SpeculationPolicy("adaptive", k=2, on_below_batch=1.0, off_above_batch=3.0, window_s=1.0)
    restart = RestartConfig(at_s=0.05, replica=0, cold_start_s=0.01, on_restart="reroute", fallback="same")
    at_zero = RestartConfig(at_s=0.0, replica=0, cold_start_s=0.01, on_restart="reroute", fallback="same")
    profile = synthetic_profile()
    for policy, replicas, rs, python_timer in ((fixed, 1, None, False), (fixed, 2, None, False),
                                               (adaptive, 1, None, False), (fixed, 2, restart, False),
                                               (fixed, 2, at_zero, False), (fixed, 1, None, True)):
        reqs = [Request(i, i, 0.02 * i, 40, 20, timeout_s=0.1, negrates=[-0.8, -0.6]) for i in range(8)]
        profile_timer = ProfileStepTimer(profile)
        timer = (lambda shape, t=profile_timer: t(shape)) if python_timer else profile_timer
        spec = FleetSpec(cfg, policy, proposer="ngram", replicas=replicas, restart=rs)
        Fleet(spec, timer, np.random.default_rng(0)).run(reqs)


if __name__ == "__main__":
    warm()
