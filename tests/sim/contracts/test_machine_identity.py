"""A run says in one line when this machine is not the one its profile was measured on."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.contracts.machine_identity import (
    Machine,
    both_machines,
    machine_line,
    profile_machine,
    this_machine,
)
from sim.contracts.profile import Profile
from sim.contracts.synthetic import synthetic_profile_dict

LIBS = {"torch": "2.5.1+cpu", "numpy": "2.1.3", "specplan": "0.1.0", "transformers": "5.0.0"}


def measured(kind: str = "cpu", name: str = "AMD EPYC 7B13", driver: str | None = None,
             host_cpu: str | None = None, libraries: dict[str, str] | None = None) -> Profile:
    d = synthetic_profile_dict()
    prov = d["timing"]["provenance"] = copy.deepcopy(d["timing"]["provenance"])
    prov.update(method="measured", date="2026-12-01T10:00:00Z",
                device={"kind": kind, "name": name, "driver": driver, "count": 1,
                        **({"host_cpu": host_cpu} if host_cpu else {})},
                libraries=dict(LIBS if libraries is None else libraries))
    return Profile.from_dict(d, "p.json")


def here(cpu: str = "AMD EPYC 7B13", gpu: str | None = None, driver: str | None = None,
         **libs: str) -> Machine:
    versions = {**{k: v for k, v in LIBS.items() if k != "transformers"}, **libs}
    return Machine(cpu=cpu, gpu=gpu, driver=driver, libraries=tuple(versions.items()))


def test_the_same_machine_says_nothing():
    assert machine_line(measured(), here()) is None


def test_another_cpu_and_library_are_named_in_one_line():
    line = machine_line(measured(), here(cpu="Intel Xeon Platinum 8481C", numpy="1.26.4"))
    assert line is not None and "\n" not in line
    assert "CPU: here 'Intel Xeon Platinum 8481C', profile 'AMD EPYC 7B13'" in line
    assert "numpy: here 1.26.4, profile 2.1.3" in line
    assert "torch" not in line  # the same version is not a difference


def test_a_gpu_profile_read_on_a_cpu_only_machine_says_so():
    p = measured(kind="cuda", name="NVIDIA H200", driver="550.54", host_cpu="Intel Xeon 8480")
    line = machine_line(p, here(cpu="Intel Xeon 8480"))
    assert line is not None and "GPU: here none, profile NVIDIA H200" in line


def test_another_driver_on_the_same_gpu_is_a_difference():
    p = measured(kind="cuda", name="NVIDIA H200", driver="550.54", host_cpu="Intel Xeon 8480")
    assert machine_line(p, here(cpu="Intel Xeon 8480", gpu="NVIDIA H200", driver="550.54")) is None
    line = machine_line(p, here(cpu="Intel Xeon 8480", gpu="NVIDIA H200", driver="560.35"))
    assert line is not None and "driver: here 560.35, profile 550.54" in line


def test_facts_an_old_profile_lacks_are_not_compared():
    """A profile written before numpy was recorded: numpy is not a difference."""
    old = measured(libraries={"torch": "2.5.1+cpu", "specplan": "0.1.0"})
    assert machine_line(old, here(numpy="0.0.1")) is None


def test_a_profile_not_measured_on_a_machine_says_nothing():
    from sim.contracts.synthetic import synthetic_profile

    p = synthetic_profile()  # assumed: nothing was measured anywhere
    assert profile_machine(p) is None
    assert machine_line(p, here(cpu="anything else")) is None
    assert "not measured on a machine" in both_machines(p, here())


def test_validate_names_both_machines_whether_or_not_they_differ():
    same = both_machines(measured(), here())
    assert "profile measured on cpu 'AMD EPYC 7B13'" in same and "this machine: cpu 'AMD EPYC 7B13'" in same
    assert same.endswith("(the same machine)")
    other = both_machines(measured(), here(cpu="Apple M3"))
    assert "this machine: cpu 'Apple M3'" in other and "different: CPU" in other


names = st.sampled_from(["AMD EPYC 7B13", "Intel Xeon 8481C", "Apple M3"])
versions = st.sampled_from(["1.0", "2.0"])


@settings(max_examples=60, deadline=None)
@given(cpu=names, torch=versions, numpy=versions, cpu2=names, torch2=versions, numpy2=versions)
def test_a_line_exactly_when_a_known_fact_differs(cpu, torch, numpy, cpu2, torch2, numpy2):
    p = measured(name=cpu, libraries={"torch": torch, "numpy": numpy, "specplan": "0.1.0"})
    line = machine_line(p, here(cpu=cpu2, torch=torch2, numpy=numpy2))
    assert (line is None) == ((cpu, torch, numpy) == (cpu2, torch2, numpy2))


def test_this_machine_names_its_cpu_and_libraries():
    import numpy

    m = this_machine()
    assert isinstance(m.cpu, str) and m.cpu
    assert dict(m.libraries)["numpy"] == numpy.__version__
