"""Dashboard hardening without a browser: the bind address, hostile uploads, path escapes.

Uploads go through the same functions the upload callbacks call (``decode_upload`` then
``parse_scenario_upload`` / ``parse_profile_upload``); every hostile one must end in one
``SpecplanError`` line naming the upload, never another exception, never a file read outside
the allowed folders.
"""

from __future__ import annotations

import argparse
import base64
import json
from pathlib import Path

import numpy as np
import pytest

import dashboard.files as df
from cli import dashboard as cmd_dashboard
from sim.contracts.errors import SpecplanError
from sim.contracts.synthetic import synthetic_profile_dict
from tests.fuzz_cases import BASE_SCENARIO, byte_mutate, deep_nesting, mutate_tree, to_toml


def data_url(raw: bytes) -> str:
    return "data:application/octet-stream;base64," + base64.b64encode(raw).decode()


@pytest.fixture
def roots(tmp_path: Path) -> df.Roots:
    base = tmp_path / "root"
    (base / "profiles").mkdir(parents=True)
    (base / "scenarios").mkdir()
    (base / "profiles" / "profile.json").write_text(json.dumps(synthetic_profile_dict()))
    (tmp_path / "secret.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,1,1\n")
    return df.Roots.under(base, traces=())


def test_binds_localhost_by_default() -> None:
    p = argparse.ArgumentParser()
    cmd_dashboard.add_arguments(p)
    assert p.parse_args([]).host == "127.0.0.1"


def _upload(roots: df.Roots, raw: bytes, name: str) -> None:
    text = df.decode_upload(data_url(raw), name)
    if name.endswith(".toml"):
        df.parse_scenario_upload(text, name, roots)
    else:
        df.parse_profile_upload(text, name)


def test_oversized_upload_is_refused_before_decoding(roots: df.Roots) -> None:
    big = b"x" * (df.MAX_UPLOAD_BYTES + 10)
    with pytest.raises(SpecplanError, match=r"big\.json: file too large"):
        _upload(roots, big, "big.json")


@pytest.mark.parametrize("depth", [100, 5000, 200000])
def test_deep_nesting_in_an_upload_is_one_line(roots: df.Roots, depth: int) -> None:
    for name, kind in (("deep.json", "json"), ("deep.toml", "toml")):
        with pytest.raises(SpecplanError) as info:
            _upload(roots, deep_nesting(kind, depth), name)
        assert "\n" not in str(info.value) and name in str(info.value)


@pytest.mark.parametrize("path", ["../secret.csv", "../../secret.csv", "/etc/passwd", "~/x.csv",
                                  "sub/../../secret.csv", "a\u0000b.csv"])
def test_uploaded_trace_path_cannot_escape(roots: df.Roots, path: str) -> None:
    tree = json.loads(json.dumps(BASE_SCENARIO))
    w = tree["workload"]
    w["arrival"] = "trace"
    del w["rate"]
    w["trace"] = {"path": path}
    for seg in w["segments"]:
        seg.pop("prompt_tokens")
        seg.pop("output_tokens")
    with pytest.raises(SpecplanError) as info:
        _upload(roots, to_toml(tree).encode(), "up.toml")
    msg = str(info.value)
    assert "\n" not in msg and "up.toml" in msg


def test_upload_is_parsed_never_evaluated(roots: df.Roots, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    evil = f'__import__("os").system("touch {marker}")'.encode()
    for name in ("evil.json", "evil.toml"):
        with pytest.raises(SpecplanError):
            _upload(roots, evil, name)
    import pickle

    with pytest.raises(SpecplanError):
        _upload(roots, pickle.dumps({"a": 1}), "evil.json")
    assert not marker.exists()


def test_fuzzed_uploads_end_in_one_line_naming_the_upload(roots: df.Roots) -> None:
    rng = np.random.default_rng(5)
    base_s = to_toml({**BASE_SCENARIO, "fleet": {k: v for k, v in BASE_SCENARIO["fleet"].items()
                                                  if k != "profile"}}).encode()
    base_p = json.dumps(synthetic_profile_dict()).encode()
    ok = bad = 0
    for i in range(300):
        if i % 2:
            name, raw = "up.toml", to_toml(mutate_tree(BASE_SCENARIO, rng, int(rng.integers(1, 4)))).encode()
        else:
            name, raw = "up.json", json.dumps(mutate_tree(synthetic_profile_dict(), rng, 2)).encode()
        if rng.random() < 0.3:
            raw = byte_mutate(raw or (base_s if name.endswith("toml") else base_p), rng)
        try:
            _upload(roots, raw, name)
            ok += 1
        except SpecplanError as exc:
            msg = str(exc)
            assert "\n" not in msg and name in msg, msg
            bad += 1
    assert ok + bad == 300 and bad > 100
