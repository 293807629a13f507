"""Loading and validating calibration profiles (docs/profile-format.md)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile, load_profile
from sim.contracts.synthetic import synthetic_profile_dict

MEASURED = {
    "method": "measured",
    "device": {"kind": "cpu", "name": "AMD EPYC 7B13", "memory_bytes": 25769803776, "driver": None, "count": 1},
    "dtype": "float32",
    "libraries": {"torch": "2.13.0+cpu", "transformers": "5.24.0", "specplan": "0.1.0"},
    "models": {"target": "x"},
    "date": "2026-11-29T18:30:00Z",
    "command": "specplan profile --quick",
    "citation": None,
    "notes": None,
}


def write(tmp_path: Path, d: Any, name: str = "p.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(d), encoding="utf-8")
    return path


def test_synthetic_round_trip_through_file(tmp_path: Path) -> None:
    d = synthetic_profile_dict(segments=[("chat", "en", 0.0), ("code", "any", 0.7)])
    p = load_profile(write(tmp_path, d))
    assert p.name == "synthetic"
    assert p.target.config_only
    assert p.timing.target_forward.axis_names == ("batch", "tokens_per_seq", "context")
    assert p.timing.target_forward.median.shape == (7, 6, 4)
    assert not p.timing.target_forward.median.flags.writeable
    seg = p.acceptance["ngram"].segments[1]
    assert str(seg.key) == "code:any:0.7"
    assert seg.num_accepted_tokens == sum(seg.accepted_per_pos)
    assert len(seg.per_request) == 21
    assert p.sources()[0].startswith("timing: assumed")


def test_sources_lines_name_device_dtype_date_and_libraries() -> None:
    d = synthetic_profile_dict()
    d["timing"]["provenance"] = MEASURED
    d["acceptance"]["ngram"]["provenance"] = {"method": "published", "citation": "Leviathan et al. 2023, table 3"}
    p = Profile.from_dict(d, "mem")
    lines = p.sources()
    assert lines[0] == "timing: measured on cpu 'AMD EPYC 7B13' float32, 2026-11-29 (torch 2.13.0+cpu, transformers 5.24.0) [steps: sum of a decode and a prefill pass]"
    assert lines[1].startswith("memory: assumed")
    assert lines[2] == "acceptance[ngram]: published (citation: Leviathan et al. 2023, table 3)"


def test_axes_in_other_order_are_transposed_to_canonical_order() -> None:
    d = synthetic_profile_dict()
    ref = Profile.from_dict(d, "ref").timing.target_forward
    g = d["timing"]["target_forward"]
    arr = np.array(g["median"])  # batch, tokens_per_seq, context
    g["axes"] = {"context": g["axes"]["context"], "batch": g["axes"]["batch"], "tokens_per_seq": g["axes"]["tokens_per_seq"]}
    g["median"] = np.transpose(arr, (2, 0, 1)).tolist()
    got = Profile.from_dict(d, "t").timing.target_forward
    assert got.axis_names == ref.axis_names and got.axes == ref.axes
    np.testing.assert_array_equal(got.median, ref.median)


def test_null_cells_load_as_nan_and_x_keys_are_kept() -> None:
    d = synthetic_profile_dict()
    d["timing"]["target_forward"]["median"][-1][-1][-1] = None
    d["x-comment"] = {"anything": [1, 2]}
    p = Profile.from_dict(d, "t")
    assert p.timing.target_forward.null_cells == 1
    assert p.extras == {"x-comment": {"anything": [1, 2]}}


def _set(path: str, value: Any) -> Callable[[dict], None]:
    """Mutation setting a dotted path (ints index lists)."""

    def apply(d: dict) -> None:
        keys: list[Any] = [int(k) if k.lstrip("-").isdigit() else k for k in path.split(".")]
        node: Any = d
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = value

    return apply


def _del(path: str) -> Callable[[dict], None]:
    def apply(d: dict) -> None:
        keys = path.split(".")
        node: Any = d
        for k in keys[:-1]:
            node = node[int(k) if k.isdigit() else k]
        del node[keys[-1]]

    return apply


def _seg(field: str) -> str:
    return f"acceptance.ngram.segments.0.{field}"


_PB_GRID = {"axes": {"batch": [1, 4], "context": [64, 256]}, "median": [[0.001, 0.002], [0.003, 0.004]]}

BAD: list[tuple[str, Callable[[dict], None], str]] = [
    ("schema", _set("schema", "other"), "schema: expected 'specplan.profile'"),
    ("version", _set("schema_version", 2), "schema_version: this reader understands version 1, got 2"),
    ("unknown key", _set("timng", {}), "timng: unknown key"),
    ("unknown nested key", _set("memory.device_memory", 1), "memory.device_memory: unknown key"),
    ("missing section", _del("memory"), "memory: missing (required)"),
    ("bad name", _set("name", "has space"), "name: 'has space' does not match"),
    ("grid shape", _set("timing.target_prefill.median", [[1.0, 2.0]]), "timing.target_prefill.median: expected 2-d array 4x4"),
    ("grid inner shape", _set("timing.target_prefill.median.1", [1.0]), "timing.target_prefill.median[1]: expected 2-d array 4x4 (axis 2, axes.context, of length 4), got length 1"),
    ("axes names", _set("timing.target_prefill.axes", {"tokens": [1, 2, 3, 4], "ctx": [0, 1, 2, 3]}), "expected axes tokens, context"),
    ("axis not increasing", _set("timing.target_forward.axes.batch", [1, 2, 2, 8, 16, 32, 64]), "timing.target_forward.axes.batch[2]: axis values must be strictly increasing"),
    ("axis below min", _set("timing.target_forward.axes.batch", [0, 2, 4, 8, 16, 32, 64]), "axes.batch[0]: must be >= 1"),
    ("negative time", _set("timing.target_prefill.median.0.0", -1.0), "timing.target_prefill.median[0][0]: times must be >= 0"),
    ("string time", _set("timing.target_prefill.median.0.0", "1"), "median[0][0]: expected a number (seconds) or null"),
    ("all null", _set("timing.target_prefill.median", [[None] * 4] * 4), "every cell is null"),
    ("p10 above median", _set("timing.target_prefill.p10", [[1.0] * 4] * 4), "timing.target_prefill.p10[0][0]: p10 must be <= median"),
    ("timing proposer unknown", lambda d: d["timing"]["proposers"].update(eagle=d["timing"]["proposers"]["ngram"]), "timing.proposers.eagle: unknown proposer (profile proposers: ngram)"),
    ("memory proposer unknown", _set("memory.proposers.eagle", {"weight_bytes": 0, "kv_bytes_per_token": 0, "activation_peak_bytes": 0}), "memory.proposers.eagle: unknown proposer"),
    ("kv row proposer unknown", _set("memory.kv_capacity", [{"memory_utilization": 0.9, "proposer": "eagle", "kv_tokens": 5}]), "memory.kv_capacity[0].proposer: unknown proposer 'eagle'"),
    ("kv utilization", _set("memory.kv_capacity", [{"memory_utilization": 1.5, "proposer": None, "kv_tokens": 5}]), "memory_utilization: must be in (0, 1]"),
    ("acceptance proposer unknown", lambda d: d["acceptance"].update(eagle=d["acceptance"]["ngram"]), "acceptance.eagle: unknown proposer"),
    ("per pos length", _set(_seg("accepted_per_pos"), [1, 1]), "accepted_per_pos: expected a list of k_max = 5 counts, got length 2"),
    ("per pos increasing", _set(_seg("accepted_per_pos"), [10, 5, 6, 1, 0]), "accepted_per_pos[2]: must be non-increasing"),
    ("per pos above drafts", _set(_seg("accepted_per_pos"), [999999, 5, 4, 1, 0]), "accepted_per_pos[0]: must be <= num_drafts"),
    ("accepted sum", _set(_seg("num_accepted_tokens"), 3), "num_accepted_tokens: must equal sum(accepted_per_pos)"),
    ("draft tokens", _set(_seg("num_draft_tokens"), 3), "num_draft_tokens: must equal num_drafts * k_max"),
    ("per request row", _set(_seg("per_request.0.accepted_per_pos"), [1, 2, 0, 0, 0]), "per_request[0].accepted_per_pos[1]: must be non-increasing"),
    ("duplicate segment", lambda d: d["acceptance"]["ngram"]["segments"].append(copy.deepcopy(d["acceptance"]["ngram"]["segments"][0])), "segments[1].segment: duplicate key chat:en:0"),
    ("published without citation", _set("acceptance.ngram.provenance", {"method": "published"}), "acceptance.ngram.provenance.citation: required when method is 'published'"),
    ("measured without device", _set("timing.provenance", {"method": "measured", "date": "2026-11-29T18:30:00Z"}), "timing.provenance.device: required when method is 'measured'"),
    ("bad method", _set("timing.provenance.method", "guessed"), "timing.provenance.method: expected one of measured, estimated"),
    ("bad date", _set("timing.provenance.date", "yesterday"), "timing.provenance.date: expected ISO 8601"),
    ("config-only measured acceptance", _set("acceptance.ngram.provenance", MEASURED), "measured acceptance refused: the target is config-only"),
    ("config-only with sha", _set("target.sha256", "a" * 64), "target.sha256: must be null for a config-only model"),
    ("machine path", _set("target.path", "/home/me/model.gguf"), "target.path: must be relative"),
    ("bool as int", _set("memory.device_memory_bytes", True), "memory.device_memory_bytes: expected an integer, got boolean true"),
    ("kv bytes zero", _set("memory.target_kv_bytes_per_token", 0), "memory.target_kv_bytes_per_token: must be >= 1"),
    ("proposer kind", _set("proposers.ngram.kind", "medusa2"), "proposers.ngram.kind: expected one of draft_model, eagle, eagle3, medusa, mtp, ngram, suffix, self_draft"),
    ("padded_batch without leave", _set("timing.padded_batch", {"join": _PB_GRID}), "timing.padded_batch.leave: missing (required)"),
    ("padded_batch axes", _set("timing.padded_batch", {"join": {**_PB_GRID, "axes": {"batch": [1], "tokens": [1]}}, "leave": _PB_GRID}),
     "timing.padded_batch.join.axes: expected axes batch, context, got batch, tokens"),
]


@pytest.mark.parametrize(("mutate", "expected"), [(m, e) for _, m, e in BAD], ids=[c for c, _, _ in BAD])
def test_invalid_profiles_fail_with_one_line_naming_file_and_field(
    tmp_path: Path, mutate: Callable[[dict], None], expected: str
) -> None:
    d = synthetic_profile_dict()
    mutate(d)
    path = write(tmp_path, d)
    with pytest.raises(SpecplanError) as info:
        load_profile(path)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(f"{path}: ")
    assert expected in msg


def _node(d: Any, path: tuple) -> Any:
    for k in path:
        d = d[k]
    return d


def _grids(d: Any, path: tuple = ()) -> list[tuple]:
    if isinstance(d, dict) and "axes" in d and "median" in d:
        return [path]
    items = d.items() if isinstance(d, dict) else ()
    return [g for k, v in items for g in _grids(v, (*path, k))]


GRID_AXES = [(g, a) for g in _grids(synthetic_profile_dict()["timing"], ("timing",))
             for a in _node(synthetic_profile_dict(), g)["axes"]]


@pytest.mark.parametrize(("grid", "axis"), GRID_AXES, ids=[".".join(g) + ":" + a for g, a in GRID_AXES])
def test_axis_values_that_disagree_with_the_array_name_the_axis(tmp_path: Path, grid: tuple, axis: str) -> None:
    """One axis value fewer: the array's shape no longer matches, and either may be the typo, so
    the line names both the array cell and the axis (axes.NAME)."""
    d = synthetic_profile_dict()
    g = _node(d, grid)
    g["axes"][axis] = g["axes"][axis][:-1]
    with pytest.raises(SpecplanError) as info:
        load_profile(write(tmp_path, d))
    assert f"{'.'.join(grid)}.median" in str(info.value) and f"axes.{axis}" in str(info.value)


def test_malformed_json_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{\n  "schema": "specplan.profile",\n  "name": oops\n}\n', encoding="utf-8")
    with pytest.raises(SpecplanError, match=r"bad\.json:3: invalid JSON at column 11"):
        load_profile(path)


def test_missing_file_is_a_clean_error(tmp_path: Path) -> None:
    with pytest.raises(SpecplanError, match="profile file not found"):
        load_profile(tmp_path / "nope.json")


def test_config_only_target_accepts_imported_acceptance() -> None:
    d = synthetic_profile_dict()
    d["acceptance"]["ngram"]["provenance"] = {"method": "imported", "notes": "vLLM /metrics"}
    p = Profile.from_dict(d, "t")
    assert p.sources()[2] == "acceptance[ngram]: imported [vLLM /metrics]"


def test_draft_model_and_self_draft_proposers_parse() -> None:
    d = synthetic_profile_dict()
    target = copy.deepcopy(d["target"])  # config-only
    d["target"].update(source="gguf", sha256="0" * 64, path="models/t.gguf")
    d["proposers"]["small"] = {"kind": "draft_model", "model": target}
    d["proposers"]["sd8"] = {"kind": "self_draft", "layers": list(range(8)), "note": "first 8 layers"}
    p = Profile.from_dict(d, "t")
    assert p.proposers["small"].model is not None and p.proposers["small"].model.config_only
    assert p.proposers["sd8"].layers == tuple(range(8))
    # a measured acceptance entry for a random-weights draft model is refused
    d["acceptance"]["small"] = copy.deepcopy(d["acceptance"]["ngram"])
    d["acceptance"]["small"]["provenance"] = MEASURED
    with pytest.raises(SpecplanError, match="proposer small's draft model is config-only"):
        Profile.from_dict(d, "t")
