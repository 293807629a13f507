"""The BurstGPT CSV (HPMLL/BurstGPT, CC-BY-4.0): Azure OpenAI GPT traffic of a campus service.

Header ``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type``; ``Timestamp``
is seconds since the trace began. A row with ``Response tokens`` 0 is a failed request: such
rows are left out of the replay and counted in the trace's notes (printed with the results),
never dropped silently.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sim.contracts.errors import SpecplanError
from sim.contracts.trace_formats import read_notes, rows
from sim.contracts.trace_formats.parsed import Trace

HEADER = ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type")
USED = ("Timestamp", "Request tokens", "Response tokens")


def read(p: Path) -> Trace:
    """Read and validate a BurstGPT CSV; failed rows (no response tokens) are counted and left out."""
    df = rows.read_csv_strings(p, USED, ",".join(HEADER) + " (BurstGPT)")
    rows.check_rows(df, p, [
        rows.number_check(df, "Timestamp", "a time in seconds"),
        rows.count_check(df, "Request tokens"),
        rows.count_check(df, "Response tokens"),
    ])
    t = rows.as_numbers(df, "Timestamp")
    off = rows.offsets(t, df[rows.LINE].to_numpy(), df["Timestamp"].to_list(), p, "Timestamp")
    prompt = rows.as_counts(df, "Request tokens")
    output = rows.as_counts(df, "Response tokens")
    ok = output > 0
    failed = int((~ok).sum())
    if not ok.any():
        raise SpecplanError(f"{p}: every row has Response tokens 0 (failed requests); nothing to replay")
    line = df[rows.LINE].to_numpy()[ok]
    notes = read_notes.zero_length_notes(p.name, [("Request tokens", "prompt", prompt[ok])],
                                         lambda i: f"line {int(line[i])}")
    if failed:
        first = int(df[rows.LINE][int(np.argmax(~ok))])
        notes += (f"trace {p.name}: {failed:,} of {len(ok):,} rows ({100 * failed / len(ok):.1f} %) have "
                 f"Response tokens 0 (failed requests in BurstGPT, first at line {first}); left out "
                 "of the replay",)
    return Trace(path=p, offsets_s=off[ok], prompt_tokens=prompt[ok], output_tokens=output[ok],
                 format="burstgpt", notes=notes)
