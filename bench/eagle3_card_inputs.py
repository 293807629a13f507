"""Inputs that re-predict the EAGLE-3 rows of docs/fidelity-gpu.md §3 with the head's *published*
chain acceptance (Nebius's card, ``profiles/acceptance/nebius-card-llama-3.1-8b-eagle3.json``).

Why a script: the card's entry names its own proposer, while the imported profile prices the
EAGLE-3 head as ``eagle3``; this writes the profile with ``eagle3``'s acceptance taken from the
card (its provenance, ``published``, kept) and the §3 scenario at the card's temperature (1.0)
with the card's k range (no assumed acceptance), then prints the sweep command.

    python bench/eagle3_card_inputs.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CARD = "nebius-card-llama-3.1-8b-eagle3"


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    prof = json.loads((REPO / "profiles" / "llama-3.1-8b-h100-vllm.json").read_text(encoding="utf-8"))
    card = json.loads((REPO / "profiles" / "acceptance" / f"{CARD}.json").read_text(encoding="utf-8"))
    entry = card["acceptance"][CARD]
    entry["provenance"]["notes"] = (f"the card's entry {CARD} on the imported EAGLE-3 head "
                                    "(bench/eagle3_card_inputs.py); " + entry["provenance"]["notes"])
    prof["acceptance"]["eagle3"] = entry
    prof["name"] = f"{prof['name']}-{CARD}"
    (out / "profile.json").write_text(json.dumps(prof, indent=1) + "\n", encoding="utf-8")
    text = (REPO / "scenarios" / "fidelity-eagle3-llama8b-h100.toml").read_text(encoding="utf-8")
    text = text.replace('profile = "../profiles/llama-3.1-8b-h100-vllm.json"', 'profile = "profile.json"')
    text = text.replace("temperature = 0.0", "temperature = 1.0")
    text = text.split("# assumed, the last resort")[0]  # k=5 reads the card's entry (k <= 7), not an assumption
    text = text.replace('name = "fidelity-eagle3-llama8b-h100"', f'name = "fidelity-eagle3-llama8b-h100-{CARD}"')
    (out / "scenario.toml").write_text(text, encoding="utf-8")
    print(f"wrote {out / 'profile.json'} and {out / 'scenario.toml'}; run:\n"
          f"  python bench/concurrency_sweep.py {out / 'scenario.toml'} --n 1,64 --seeds 1,2 --no-cost")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python bench/eagle3_card_inputs.py OUT_DIR")
    main(Path(sys.argv[1]))
