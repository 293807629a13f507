"""The engine's limits travel as one object (``step_plan.EngineLimits``) from the scenario's
``[fleet.engine]`` to the kernel row (``kernel_state.new_replica``, the one place it is packed):
what the row holds is what the scenario says (unset ones: the device default,
``engine_defaults.device_defaults``), and a wrong value still fails in one line naming its TOML
field."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.contracts.errors import SpecplanError
from sim.contracts.profile import load_profile
from sim.contracts.scenario import load_scenario
from sim.model.assembly import assemble
from sim.model.engine_defaults import device_defaults
from sim.model.kernels import kernel_state as ks
from tests.helpers import BASELINE, scenario_toml, segment, write_scenario

ENGINE = st.fixed_dictionaries({}, optional={
    "max_num_seqs": st.integers(1, 4096),
    "max_num_batched_tokens": st.integers(32, 100_000),  # the prompt (32) fits with chunking off
    "block_size": st.integers(1, 64),
    "chunked_prefill": st.booleans(),
})


def _scenario(folder: Path, engine: dict, fleet: dict | None = None) -> Path:
    text = scenario_toml("limits", run={"duration_s": 1.0, "warmup_s": 0.0, "seeds": [1]},
                         workload={"arrival": "poisson", "rate": 2.0}, segments=[segment(prompt=32, output=4)],
                         fleet={"profile": "profile.json", **(fleet or {})}, engine=engine,
                         candidates=[BASELINE])
    return write_scenario(folder, text)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(engine=ENGINE, max_model_len=st.one_of(st.none(), st.integers(64, 1_000_000)))
def test_the_kernel_row_holds_the_scenarios_engine_limits(engine: dict, max_model_len: int | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = _scenario(Path(tmp), engine, None if max_model_len is None else {"max_model_len": max_model_len})
        sc = load_scenario(path)
        prof = load_profile(Path(tmp) / "profile.json")
        a = assemble(sc, prof, sc.candidates[0], 1)
    cfg = ks.new_replica(a.spec.scheduler, 0, 4, track=False, partial=False, k_max=0).cfg
    tokens, seqs, _ = device_defaults(prof)
    tokens = engine.get("max_num_batched_tokens", tokens)
    want = {
        ks.C_SEQS: engine.get("max_num_seqs", min(seqs, tokens)),
        ks.C_BUDGET: tokens,
        ks.C_BS: engine.get("block_size", 16),
        ks.C_CHUNKED: int(engine.get("chunked_prefill", True)),
        ks.C_MAXLEN: max_model_len or prof.target.max_model_len or 0,
        ks.C_KV: a.kv.kv_blocks,
    }
    assert {c: int(cfg[c]) for c in want} == want
    assert a.spec.scheduler.limits is a.limits, "the limits are passed on, not copied"


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(["max_num_seqs", "max_num_batched_tokens", "block_size"]),
       bad=st.one_of(st.integers(-1000, 0), st.just("8"), st.just(2.5), st.just(True)))
def test_a_wrong_engine_limit_names_its_toml_field_in_one_line(field: str, bad) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = _scenario(Path(tmp), {field: bad})
        try:
            load_scenario(path)
        except SpecplanError as exc:
            msg = str(exc)
        else:
            raise AssertionError(f"fleet.engine.{field} = {bad!r} was accepted")
    assert "\n" not in msg and f"fleet.engine.{field}" in msg and str(path) in msg, msg
