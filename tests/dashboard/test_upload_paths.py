"""An uploaded scenario cannot read, or learn about, any file outside the allowed folders.

Every path field is taken from the schema (``path_fields``), so a field added later is tested
here without being listed. The world: allowed folders profiles/, scenarios/ and a trace folder,
a secret file outside them, and links inside them that point at it.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dashboard import files as df
from sim.contracts.errors import SpecplanError
from sim.contracts.profile import load_profile
from sim.contracts.scenario import Scenario
from sim.contracts.scenario_paths import PathField, path_fields
from sim.contracts.synthetic import synthetic_profile_dict
from sim.contracts.toml_writer import dumps_toml
from tests.helpers import NGRAM_K3, scenario_toml, segment
from tests.sim.contracts.test_scenario_paths import put

SECRET = "TOPSECRET-do-not-show"
FIELDS = path_fields(Scenario)
PROJECT_PROFILE = Path(__file__).resolve().parents[2] / "profiles" / "llama-3.1-8b-h200-vllm.json"

_OPENED: list[str] = []
_WATCH: list[bool] = [False]


def _audit(event: str, args: tuple) -> None:
    if _WATCH[0] and event in ("open", "os.listdir", "os.scandir") and args and isinstance(args[0], str | bytes):
        _OPENED.append(os.fsdecode(args[0]))


sys.addaudithook(_audit)  # hooks cannot be removed; this one records only while _WATCH is set


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    w = tmp_path_factory.mktemp("world")
    root = w / "root"
    for sub in ("profiles", "scenarios", "traces"):
        (root / sub).mkdir(parents=True)
    prof = synthetic_profile_dict(name="syn", segments=[("chat", "en", 0.0)])
    (root / "profiles" / "syn.json").write_text(json.dumps(prof), encoding="utf-8")
    (w / "outside").mkdir()
    (w / "outside" / "secret.json").write_text(SECRET, encoding="utf-8")
    os.symlink(w / "outside", root / "scenarios" / "link_out")
    os.symlink(w / "outside" / "secret.json", root / "profiles" / "link.json")
    os.symlink(w / "outside" / "secret.json", root / "scenarios" / "link.json")
    return w


def roots(world: Path) -> df.Roots:
    return df.Roots.under(world / "root", traces=(world / "root" / "traces",))


def document(pf: PathField, raw: str) -> tuple[dict, str]:
    """A scenario document with ``raw`` at the field's place (and nothing else naming a file)."""
    data = tomllib.loads(scenario_toml("t", run={"duration_s": 10}, workload={"arrival": "poisson", "rate": 1.0},
                                       segments=[segment()], candidates=[NGRAM_K3]))
    return data, put(data, pf.where, raw)


def attempt(world: Path, pf: PathField, raw: str) -> tuple:
    """What the upload check does with ``raw`` at ``pf``: refused (its message), kept (the path)
    or dropped; and what was opened or listed outside the allowed folders meanwhile."""
    data, where = document(pf, raw)
    _OPENED.clear()
    _WATCH[0] = True
    try:
        out = df.confine_upload_paths(data, "up.toml", roots(world))
    except SpecplanError as exc:
        result: tuple = ("refused", str(exc), where)
    else:
        node: object = out
        for part in where.replace("[", ".[").split("."):
            node = node[int(part[1:-1])] if part.startswith("[") else node.get(part)  # type: ignore[union-attr]
        result = ("dropped", where) if node is None else ("kept", node, where)
    finally:
        _WATCH[0] = False
    outside = str(world / "outside")
    return result, [p for p in _OPENED if p.startswith(outside)]


def check_refusal(result: tuple, pf: PathField) -> None:
    _, msg, where = result
    assert "\n" not in msg and SECRET not in msg
    assert msg.startswith(f"up.toml: {where}: "), msg
    if "NUL" not in msg and "empty" not in msg:
        folders = "profiles/" if pf.kind == "profile" else "scenarios/, profiles/, traces/"
        assert f"may only name files in {folders}" in msg, msg


SEGMENTS = st.sampled_from(["..", ".", "", "outside", "secret.json", "link_out", "link.json", "profiles",
                            "scenarios", "traces", "root", "x.csv"])


@pytest.mark.parametrize("pf", FIELDS, ids=[p.where for p in FIELDS])
@settings(max_examples=150, deadline=None)
@given(prefix=st.sampled_from(["", "/", "WORLD/", "ROOT/", "ROOT/scenarios/"]),
       parts=st.lists(SEGMENTS, min_size=1, max_size=6))
def test_any_path_is_kept_inside_the_allowed_folders_or_refused_the_same_whether_or_not_it_exists(
        world, pf, prefix, parts):
    raw = prefix.replace("WORLD", str(world)).replace("ROOT", str(world / "root")) + "/".join(parts)
    secret = world / "outside" / "secret.json"
    there, opened_there = attempt(world, pf, raw)
    secret.unlink()
    try:
        gone, opened_gone = attempt(world, pf, raw)
    finally:
        secret.write_text(SECRET, encoding="utf-8")
    assert there == gone, "the outcome must not tell whether a file outside exists"
    assert opened_there == [] and opened_gone == [], "nothing outside the allowed folders is opened or listed"
    allowed = [os.path.realpath(r) for r in roots(world).folders().roots(pf.kind)]
    if there[0] == "kept":
        assert os.path.realpath(there[1]) == there[1]
        assert any(there[1] == r or there[1].startswith(r + os.sep) for r in allowed), there
    elif there[0] == "refused":
        check_refusal(there, pf)
    else:
        assert pf.where == "fleet.profile", there  # only [fleet]'s profile is dropped (chosen in the page)


HOSTILE = ["{world}/outside/secret.json", "/etc/hostname", "../../outside/secret.json", "link_out/secret.json",
           "../profiles/link.json", "link.json", "../profiles/../../outside/secret.json", "a\x00b.json",
           "{world}/root/profiles/../../outside/secret.json"]


@pytest.mark.parametrize("pf", FIELDS, ids=[p.where for p in FIELDS])
@pytest.mark.parametrize("raw", HOSTILE)
def test_each_hostile_path_is_refused_in_one_line_naming_the_field(world, pf, raw):
    result, opened = attempt(world, pf, raw.format(world=world))
    assert opened == []
    if pf.where == "fleet.profile":
        assert result[0] == "dropped"
    else:
        assert result[0] == "refused", result
        check_refusal(result, pf)


@pytest.mark.parametrize("pf", [p for p in FIELDS if p.where != "fleet.profile"], ids=lambda p: p.where)
def test_the_upload_itself_refuses_a_path_outside_before_reading_anything(world, pf):
    data, where = document(pf, str(world / "outside" / "secret.json"))
    with pytest.raises(SpecplanError) as exc:
        df.parse_scenario_upload(dumps_toml(data), "up.toml", roots(world))
    assert str(exc.value).startswith(f"up.toml: {where}: an uploaded scenario may only name files in ")
    assert SECRET not in str(exc.value)


NAMED = scenario_toml("named", run={"duration_s": 10}, workload={"arrival": "poisson", "rate": 1.0},
                      segments=[segment()], fleet={"profile": "../profiles/syn.json"},
                      candidates=[NGRAM_K3, {**NGRAM_K3, "name": "on-h200", "fleet": "h200"}])


@pytest.mark.parametrize("given_as", ["../profiles/llama-3.1-8b-h200-vllm.json", "llama-3.1-8b-h200-vllm.json",
                                      "ROOT/profiles/llama-3.1-8b-h200-vllm.json"])
def test_a_named_fleet_in_profiles_loads_its_profile(world, given_as):
    if not PROJECT_PROFILE.is_file():
        pytest.skip("profiles/llama-3.1-8b-h200-vllm.json is not in this checkout")
    target = world / "root" / "profiles" / PROJECT_PROFILE.name
    if not target.exists():
        shutil.copy(PROJECT_PROFILE, target)
    raw = given_as.replace("ROOT", str(world / "root"))
    sc = df.parse_scenario_upload(NAMED + f'\n[fleets.h200]\nprofile = "{raw}"\n', "up.toml", roots(world))
    path = sc.require_profile_path(sc.candidate("on-h200"))
    assert path == target.resolve()
    assert load_profile(path).name == json.loads(PROJECT_PROFILE.read_text())["name"]
    assert df.profile_name_of(sc, roots(world)) == "syn.json"  # [fleet]'s own profile, kept: it is in profiles/


def test_fleet_profile_outside_is_dropped_and_the_page_chooses_one(world):
    sc = df.parse_scenario_upload(NAMED.replace("../profiles/syn.json", str(world / "outside" / "secret.json"))
                                  + '\n[fleets.h200]\nprofile = "syn.json"\n', "up.toml", roots(world))
    assert sc.fleet.profile is None and df.profile_name_of(sc, roots(world)) is None


def test_a_named_fleet_pointing_out_is_refused_not_dropped(world):
    with pytest.raises(SpecplanError, match=r"^up\.toml: fleets\.h200\.profile: an uploaded scenario may only "
                                            r"name files in profiles/"):
        df.parse_scenario_upload(NAMED + '\n[fleets.h200]\nprofile = "/etc/hostname"\n', "up.toml", roots(world))
