"""`specplan capacity` says "undetermined … measure about M more" when its answer changes inside
the profile's acceptance interval, in the terminal and in --json (the CLI only renders the
answer `sim.decisions.capacity_doubt` judged)."""

from __future__ import annotations

import json

from cli.main import main
from tests.sim.decisions.test_capacity_doubt import capacity_root

FAST = ["--max-evals", "4", "--rel-tol", "0.25", "--no-profile-band"]


def test_capacity_json_and_terminal_say_undetermined_with_the_sample_size_reason(tmp_path, capsys):
    path = str(capacity_root(tmp_path, 1))
    assert main(["capacity", path, "--json", *FAST]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["decision"]["outcome"] == "undetermined"
    (iv,) = doc["decision"]["acceptance_interval"]
    assert iv["candidate"] == "spec" and iv["flips"] is True
    assert iv["reason"].startswith("the profile measured 1 prompt for segment chat")
    assert main(["capacity", path, *FAST]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("verdict: undetermined: spec: the answer changes inside its acceptance interval")
    assert any(x.startswith("  acceptance interval: spec: acceptance length") for x in out)
