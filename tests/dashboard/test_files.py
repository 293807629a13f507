"""What the dashboard may read (no path traversal, uploads validated like the CLI) and URL state."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from dashboard import files as df
from dashboard import state as st
from dashboard.app import create_app
from dashboard.page_run import run_view
from sim.contracts.errors import SpecplanError
from sim.contracts.profile import load_profile
from sim.contracts.scenario import load_scenario
from sim.contracts.synthetic import synthetic_profile_dict
from tests.helpers import NGRAM_K3, scenario_toml, segment

SCENARIO = scenario_toml(
    'tiny',
    run={'duration_s': 30, 'warmup_s': 5, 'seeds': [1, 2]},
    workload={'arrival': 'poisson', 'rate': 1.0},
    segments=[segment(share=0.6, prompt=100, output=20), segment('code', share=0.4, prompt=200, output=30, task='code')],
    slo={'ttft_ms': 1000, 'tpot_ms': 100},
    fleet={'profile': '../profiles/syn.json', 'price_per_gpu_hour': 1.0},
    candidates=[NGRAM_K3, {'name': 'ngram-cut', 'proposer': 'ngram', 'k': 4, 'policy': 'off_above_batch', 'max_batch': 8}],
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    base = tmp_path / "root"
    (base / "profiles").mkdir(parents=True)
    (base / "scenarios" / "sub").mkdir(parents=True)
    prof = synthetic_profile_dict(name="syn", segments=[("chat", "en", 0.0), ("code", "en", 0.0)])
    (base / "profiles" / "syn.json").write_text(json.dumps(prof), encoding="utf-8")
    (base / "scenarios" / "tiny.toml").write_text(SCENARIO, encoding="utf-8")
    (base / "scenarios" / "sub" / "hidden.toml").write_text(SCENARIO, encoding="utf-8")
    (base / "scenarios" / "odd name.toml").write_text(SCENARIO, encoding="utf-8")
    (tmp_path / "secret.toml").write_text(SCENARIO, encoding="utf-8")
    os.symlink(tmp_path / "secret.toml", base / "scenarios" / "link.toml")
    return base


def roots_of(root: Path) -> df.Roots:
    return df.Roots.under(root, traces=())


def data_url(text: str | bytes) -> str:
    raw = text.encode() if isinstance(text, str) else text
    return "data:application/octet-stream;base64," + base64.b64encode(raw).decode()


def test_listing_only_plain_files_inside(root: Path):
    r = roots_of(root)
    assert df.list_scenarios(r) == ["tiny.toml"]  # no sub-folders, odd names or links leading out
    assert df.list_profiles(r) == ["syn.json"]


@pytest.mark.parametrize("name", ["../secret.toml", "sub/hidden.toml", "link.toml", "/etc/passwd",
                                  "..", "tiny.toml/../../secret.toml", "odd name.toml", "", "TINY.toml"])
def test_names_outside_the_listing_are_refused(root: Path, name: str):
    with pytest.raises(SpecplanError, match="valid: tiny.toml"):
        df.load_named_scenario(roots_of(root), name)


def test_named_files_load(root: Path):
    r = roots_of(root)
    s = df.load_named_scenario(r, "tiny.toml")
    assert s.name == "tiny" and df.profile_name_of(s, r) == "syn.json"
    assert df.load_named_profile(r, "syn.json").name == "syn"
    with pytest.raises(SpecplanError, match="valid: syn.json"):
        df.load_named_profile(r, "../profiles/syn.json")


def test_run_view_refuses_traversal(root: Path):
    r = roots_of(root)
    kw = dict(uploaded_scenario=None, uploaded_profile=None, whatif={}, load_text="1", seeds=1)
    with pytest.raises(SpecplanError, match="not one of the scenarios/ files"):
        run_view(r, scenario_value="../secret.toml", profile_value=None, **kw)
    with pytest.raises(SpecplanError, match="not one of the profiles/ files"):
        run_view(r, scenario_value="tiny.toml", profile_value="../../etc/passwd", **kw)


def test_http_serves_nothing_outside_assets(root: Path):
    client = create_app(roots_of(root), background=False).server.test_client()
    assert client.get("/").status_code == 200
    for url in ("/assets/../scenarios/tiny.toml", "/assets/..%2F..%2Fsecret.toml", "/scenarios/tiny.toml",
                "/profiles/syn.json", "/assets/%2e%2e/%2e%2e/secret.toml"):
        resp = client.get(url)
        assert resp.status_code in (308, 404) or b"[run]" not in resp.data, url
        assert b"duration_s" not in resp.data


def test_decode_upload_errors():
    assert df.decode_upload(data_url("a = 1"), "x.toml") == "a = 1"
    with pytest.raises(SpecplanError, match="not an uploaded file"):
        df.decode_upload("garbage", "x.toml")
    with pytest.raises(SpecplanError, match="not valid base64"):
        df.decode_upload("data:x;base64,@@@@", "x.toml")
    with pytest.raises(SpecplanError, match="not UTF-8"):
        df.decode_upload(data_url(b"\xff\xfe\x00"), "x.toml")
    with pytest.raises(SpecplanError, match="too large"):
        df.decode_upload(data_url("x" * 2000), "x.toml", max_bytes=1000)
    assert df.upload_label("../../etc/pass wd.toml", "u") == "pass_wd.toml"


def test_scenario_upload_gives_the_loaders_message(root: Path, tmp_path: Path):
    r = roots_of(root)
    bad = SCENARIO.replace("rate = 1.0", "rate = -2.0")
    on_disk = tmp_path / "bad.toml"
    on_disk.write_text(bad, encoding="utf-8")
    with pytest.raises(SpecplanError) as cli:
        load_scenario(on_disk)
    with pytest.raises(SpecplanError) as up:
        df.parse_scenario_upload(bad, "bad.toml", r)
    assert str(up.value) == str(cli.value).replace(str(on_disk), "bad.toml")
    assert "workload.rate" in str(up.value)
    with pytest.raises(SpecplanError, match=r"^bad\.toml:3: TOML syntax error"):
        df.parse_scenario_upload('name = "x"\n[run]\nduration_s = = 1\n', "bad.toml", r)


def test_uploaded_scenario_cannot_reach_other_files(root: Path, tmp_path: Path):
    r = roots_of(root)
    s = df.parse_scenario_upload(SCENARIO.replace('profile = "../profiles/syn.json"', 'profile = "/etc/passwd"'),
                                 "u.toml", r)
    assert s.fleet.profile is None  # the profile is chosen in the dashboard, never read from an upload
    trace = "\n".join(line for line in SCENARIO.replace(
        'arrival = "poisson"\nrate = 1.0', 'arrival = "trace"\ntrace = {path = "%s"}').splitlines()
        if "_tokens = " not in line)
    for path in ("/etc/passwd", "../../secret.toml", str(tmp_path / "secret.toml")):
        with pytest.raises(SpecplanError, match="workload.trace.path: an uploaded scenario may only"):
            df.parse_scenario_upload(trace % path, "u.toml", r)
    csv = root / "scenarios" / "t.csv"
    csv.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,100,20\n")
    ok = df.parse_scenario_upload(trace % "t.csv", "u.toml", r)
    assert ok.workload.trace is not None and Path(ok.workload.trace.path) == csv.resolve()


def test_profile_upload_gives_the_loaders_message(root: Path, tmp_path: Path):
    text = (root / "profiles" / "syn.json").read_text()
    assert df.parse_profile_upload(text, "p.json").name == "syn"
    bad = json.loads(text)
    bad["schema_version"] = 7
    on_disk = tmp_path / "p.json"
    on_disk.write_text(json.dumps(bad))
    with pytest.raises(SpecplanError) as cli:
        load_profile(on_disk)
    with pytest.raises(SpecplanError) as up:
        df.parse_profile_upload(json.dumps(bad), "p.json")
    assert str(up.value) == str(cli.value).replace(str(on_disk), "p.json")
    with pytest.raises(SpecplanError, match=r"^p\.json:1: invalid JSON"):
        df.parse_profile_upload("{nope", "p.json")


# ---------------------------------------------------------------------------- URL state


def test_url_round_trip():
    vs = st.ViewState("tiny.toml", "syn.json", {"workload.rate": 3.0, "candidates[ngram-k3].k": 4,
                                                "slo.ttft_ms": None}, (0.5, 1.0, 3.0), 2)
    back = st.from_search(st.to_search(vs))
    assert back == vs
    assert st.from_search("") == st.ViewState()


@pytest.mark.parametrize("search", ["?fleet.profile=/etc/passwd", "?workload.trace.path=/etc/passwd",
                                    "?run.seeds=[1]", "?__class__=x", "?seeds=abc", "?load=0,1",
                                    "?workload.rate=inf", "?candidates[x].k_by_batch=[1,__import__]"])
def test_url_refuses_what_is_not_a_whatif(search: str):
    with pytest.raises(SpecplanError):
        st.from_search(search)


def test_controls_to_overrides(root: Path):
    s = df.load_named_scenario(roots_of(root), "tiny.toml")
    same = st.control_values(s, {})
    assert st.overrides_from_controls(s, same) == {}  # unchanged controls leave the link short
    changed = dict(same, **{"workload.rate": "2.5", "workload.burstiness": 0.5, "slo.tpot_ms": None,
                            "candidates[ngram-k3].policy": "off_above_batch",
                            "candidates[ngram-cut].policy": "fixed"})
    ov = st.overrides_from_controls(s, changed)
    assert ov["workload.rate"] == 2.5 and ov["workload.arrival"] == "gamma" and ov["slo.tpot_ms"] is None
    assert ov["candidates[ngram-k3].max_batch"] == st.DEFAULT_MAX_BATCH
    assert ov["candidates[ngram-cut].max_batch"] is None
    applied = st.apply(s, st.ViewState("tiny.toml", None, ov, seeds=1))
    assert applied.workload.arrival == "gamma" and applied.workload.burstiness == 0.5
    assert applied.candidate("ngram-k3").policy == "off_above_batch"
    assert applied.candidate("ngram-cut").policy == "fixed" and applied.candidate("ngram-cut").max_batch is None
    assert applied.slo.tpot_ms is None and applied.run.seeds == (1,)
    assert st.apply(s, st.ViewState(seeds=3)).run.seeds == (1, 2, 3)
    with pytest.raises(SpecplanError, match="expected a whole number"):
        st.overrides_from_controls(s, dict(same, **{"fleet.replicas": 1.5}))
    with pytest.raises(SpecplanError, match="valid: fixed"):
        st.overrides_from_controls(s, dict(same, **{"candidates[ngram-k3].policy": "eval"}))


def test_load_factors():
    assert st.parse_load_factors("2, 0.5x,") == (0.5, 1.0, 2.0)
    with pytest.raises(SpecplanError, match="not a number"):
        st.parse_load_factors("1, two")
    with pytest.raises(SpecplanError, match="at most"):
        st.parse_load_factors(",".join(str(i) for i in range(1, 12)))


def test_dashboard_command_checks_its_arguments(tmp_path: Path, capsys):
    from cli.main import main

    assert main(["dashboard", "--root", str(tmp_path / "nowhere")]) == 2
    assert "has neither scenarios/ nor profiles/" in capsys.readouterr().err
    assert main(["dashboard", "--port", "70000"]) == 2
    assert "--port" in capsys.readouterr().err
