"""Which routing the kernel database's MoE rows are read under, by model family, and the compile
that reads them.

Why its own module: aiconfigurator-core times its MoE op per token count under a routing
(``balanced``, ``power_law_1.01``, ``power_law_1.2`` rows) and compiles every model with its
default, a power law; the choice moves a MoE's verify and mid-batch decode by up to 70 % (Qwen3-30B-A3B,
16 tokens), so it is made here, per family, only where measured runs decide it.
"""

from __future__ import annotations

from typing import Any

ROUTING = "balanced"
ROUTED_FAMILIES: dict[str, str] = {"qwen3_moe": "Qwen3-235B-A22B-FP8 on 2x H200, vLLM, NVIDIA's silicon TPOT "
                                                "(silicon_sample.csv, 26 rows): median |error| 8.8 % against 24.2 % "
                                                "with the default rows; Qwen3-30B-A3B on 2x H100, SGLang (SpecForge "
                                                "#339): a 16-row step 13.8 ms against the run's 15.8 (default 9.9)"}
"""Config ``model_type`` -> why its experts are timed from the :data:`ROUTING` rows (tokens spread
evenly, the uniform routing sim.contracts.expert_traffic assumes) instead of the package's default
power law, which sends a few tokens to far fewer experts. Only where measured runs say so: for
gpt-oss-120b on one H200 (vLLM) the default rows fit NVIDIA's silicon TPOT (18 of 18 rows within
15 %) and the balanced ones do not (11 of 18): docs/fidelity-gpu.md §6."""


def compile_routed(engine_cls: Any, path: str, system: str, backend: str, version: str, layout: Any) -> Any:
    """``path`` compiled with its MoE op read from the :data:`ROUTING` rows, or None where the
    database lacks them (a decode pass at 1 and 64 rows is tried). The package's compile takes no
    routing argument, so its model-config builder is wrapped for this one call."""
    import dataclasses

    import aiconfigurator_core.sdk.engine as pkg

    build = getattr(pkg, "build_model_config", None)
    if build is None:
        return None
    pkg.build_model_config = lambda **kw: dataclasses.replace(build(**kw), workload_distribution=ROUTING)
    try:
        handle = engine_cls.compile(path, system, backend, backend_version=version, **layout.kwargs(True))
        for rows in (1, 64):
            handle.decode_step_per_op(rows, 1024, 2)
        return handle
    except (ValueError, AssertionError, KeyError, NotImplementedError, RuntimeError):
        return None
    finally:
        pkg.build_model_config = build
