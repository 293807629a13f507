"""The scenario schema says which fields are paths; the walker reaches every one of them; the CLI
still reads the user's own paths wherever they are."""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from pathlib import Path

from sim.contracts.dataclass_mapping import public_fields, type_hints
from sim.contracts.profile import load_profile
from sim.contracts.scenario import Scenario, load_scenario
from sim.contracts.scenario_paths import map_paths, path_fields
from sim.contracts.synthetic import synthetic_profile_dict
from tests.helpers import NGRAM_K3, scenario_toml, segment

NOT_PATHS = {
    "name", "description",
    "workload.segments[].name", "workload.segments[].acceptance.task",
    "workload.segments[].acceptance.language", "workload.segments[].acceptance.fallback",
    "workload.trace.columns.timestamp", "workload.trace.columns.prompt_tokens",
    "workload.trace.columns.output_tokens", "workload.trace.columns.hash_ids",
    "fleet.request_overhead.citation", "fleet.engine.version",
    "candidates[].name", "candidates[].proposer", "candidates[].fleet",
    "two_routes[].name", "two_routes[].speculative", "two_routes[].baseline", "two_routes[].idealised",
}
"""Every string field of the scenario schema that does not name a file (a name, a label, a
column key, a reference to another table). A new string field must be added here or declared
with ``path_field``: an upload's paths are checked only where the schema marks them."""

KNOWN_PATHS = {"fleet.profile", "fleets.*.profile", "workload.trace.path", "candidates[].acceptance_trace"}


def string_fields(cls: type, prefix: str = "") -> set[str]:
    """Every field of the schema that holds text, as a ``path_fields`` template."""
    out: set[str] = set()
    hints = type_hints(cls)

    def walk(hint: typing.Any, where: str) -> None:
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin in (typing.Union, types.UnionType):
            for a in args:
                walk(a, where)
        elif origin is tuple:
            for a in args:
                if a is not Ellipsis:
                    walk(a, where + "[]")
        elif origin is dict:
            walk(args[1], where + ".*")
        elif dataclasses.is_dataclass(hint):
            out.update(string_fields(hint, where))
        elif hint is str:
            out.add(where)

    for f in public_fields(cls):
        walk(hints[f.name], f"{prefix}.{f.name}" if prefix else f.name)
    return out


def test_every_string_field_of_the_schema_is_a_marked_path_or_declared_not_a_path():
    marked = {p.where for p in path_fields(Scenario)}
    unclassified = string_fields(Scenario) - marked - NOT_PATHS
    assert not unclassified, (f"string fields neither declared with path_field nor listed in NOT_PATHS: "
                              f"{sorted(unclassified)}")
    assert KNOWN_PATHS <= marked
    assert not marked & NOT_PATHS


def put(data: dict, template: str, value: str) -> str:
    """Set ``value`` at a ``path_fields`` template in ``data`` (new tables and array items as
    needed); return the concrete dotted place."""
    parts = re.findall(r"\[\]|\*|[^.\[\]*]+", template)
    node: typing.Any = data
    where = ""
    i = 0
    while i < len(parts) - 1:
        key, nxt = parts[i], parts[i + 1]
        where = f"{where}.{key}" if where else key
        if nxt == "[]":
            items = node.setdefault(key, [])
            items.append({"name": "added"})
            where += f"[{len(items) - 1}]"
            node, i = items[-1], i + 2
        elif nxt == "*":
            node = node.setdefault(key, {}).setdefault("added", {})
            where += ".added"
            i += 2
        else:
            node, i = node.setdefault(key, {}), i + 1
    node[parts[-1]] = value
    return f"{where}.{parts[-1]}" if where else parts[-1]


def base_document() -> dict:
    import tomllib

    return tomllib.loads(scenario_toml(
        "t", run={"duration_s": 10}, workload={"arrival": "poisson", "rate": 1.0}, segments=[segment()],
        fleet={"profile": "../profiles/p.json"}, candidates=[NGRAM_K3]))


def test_the_walker_hands_every_path_field_to_the_resolver_at_its_concrete_place():
    for pf in path_fields(Scenario):
        data = base_document()
        data.get("fleet", {}).pop("profile", None)
        where = put(data, pf.where, "marker.txt")
        seen: list[tuple[str, str, str]] = []
        out = map_paths(Scenario, data, lambda raw, at, kind, seen=seen: seen.append((raw, at, kind)) or "X")
        assert seen == [("marker.txt", where, pf.kind)], pf.where
        assert json.dumps(out).count('"X"') == 1


def test_the_walker_leaves_what_the_loader_must_refuse_and_drops_on_none():
    data = base_document()
    data["workload"]["trace"] = 7  # a number for a table: the loader names it
    data["candidates"] = [{"name": "c", "acceptance_trace": 3}]
    out = map_paths(Scenario, data, lambda raw, at, kind: None)
    assert out["workload"]["trace"] == 7 and out["candidates"][0]["acceptance_trace"] == 3
    assert "profile" not in out["fleet"] and data["fleet"]["profile"] == "../profiles/p.json"


def test_the_cli_reads_the_users_own_absolute_paths(tmp_path: Path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    prof = elsewhere / "mine.json"
    prof.write_text(json.dumps(synthetic_profile_dict(name="mine")), encoding="utf-8")
    trace = elsewhere / "trace.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,100,20\n",
                     encoding="utf-8")
    text = scenario_toml(
        "cli", run={"duration_s": 10}, workload={"arrival": "trace", "trace": {"path": str(trace)}},
        segments=[{"name": "chat", "share": 1.0, "acceptance": {"task": "chat", "language": "en"}}],
        fleet={"profile": str(prof)},
        candidates=[{**NGRAM_K3, "fleet": "other"}])
    text += f'\n[fleets.other]\nprofile = "{prof}"\n'
    (tmp_path / "scenarios").mkdir()
    path = tmp_path / "scenarios" / "s.toml"
    path.write_text(text, encoding="utf-8")
    sc = load_scenario(path)
    assert sc.trace_path == trace and sc.profile_path == prof
    assert sc.require_profile_path(sc.candidate("ngram-k3")) == prof
    assert load_profile(sc.require_profile_path(sc.candidate("ngram-k3"))).name == "mine"
