"""Read what `vllm bench serve --save-result --save-detailed` writes, so a real vLLM run can
be compared with a simulation of the same load.

The format is vLLM's (`vllm/benchmarks/serve.py`, `main_async` and `benchmark`): one JSON
object per run (``--append-result`` appends more objects, one per line) with run facts
(``request_rate`` — a number or ``"inf"`` —, ``burstiness``, ``duration``, ``completed``,
``num_prompts``, ``model_id``, ...), summary statistics (``mean_ttft_ms``, ``p99_itl_ms``, ...)
and, with ``--save-detailed``, per-request lists in send order: ``input_lens``,
``output_lens``, ``ttfts`` (seconds), ``itls`` (a list per request of gaps between streamed
chunks, seconds), ``generated_texts`` and ``errors`` (``""`` when the request succeeded).

vLLM does not save per-request arrival or end times, so end-to-end latency is rebuilt as
``ttft + sum(itl)`` (the time of the last streamed chunk; vLLM's own ``latency`` also counts
the closing of the stream) and arrival order is the list order.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from sim.contracts.errors import SpecplanError, echo, where
from sim.contracts.input_limits import check_nesting, check_tree, read_text_limited
from sim.contracts.json_reader import decode_failure

# Per-request lists `--save-detailed` adds; without them there is nothing to compare per request.
DETAILED_KEYS = ("input_lens", "output_lens", "ttfts", "itls")


@dataclass(frozen=True, slots=True)
class VllmBenchResult:
    """One `vllm bench serve` run: its traffic settings and per-request measurements."""

    source: str
    """File (and object index when the file holds several runs) the result was read from."""
    request_rate: float
    """Configured requests/s; ``math.inf`` when vLLM sent every request at once."""
    burstiness: float
    """vLLM's gamma shape: 1 = Poisson, < 1 burstier, > 1 smoother."""
    duration_s: float | None
    """Wall time of the benchmark as vLLM measured it (first send to last completion); None
    when the file has none (or not a positive number): throughput is then unknown, not guessed."""
    input_lens: tuple[int, ...]
    """Prompt tokens of each request, in send order."""
    output_lens: tuple[int, ...]
    """Generated tokens of each request (0 for failed requests)."""
    ttfts_s: tuple[float, ...]
    """Time to first token of each request, seconds (0 for failed requests)."""
    itls_s: tuple[tuple[float, ...], ...]
    """Gaps between consecutive streamed chunks of each request, seconds."""
    errors: tuple[str, ...]
    """Error text of each request; empty string when it succeeded."""
    max_concurrency: int | None = None
    """`--max-concurrency`: when set the load was not open loop (a client-side cap)."""
    model_id: str = ""
    backend: str = ""
    date: str = ""
    summary: dict[str, float] = field(default_factory=dict)
    """vLLM's own summary numbers (``mean_ttft_ms``, ``p99_e2el_ms``, ``request_goodput``, ...)."""

    def __post_init__(self) -> None:
        n = len(self.input_lens)
        for name, key in (("output_lens", "output_lens"), ("ttfts_s", "ttfts"), ("itls_s", "itls"), ("errors", "errors")):
            if len(getattr(self, name)) != n:
                raise SpecplanError(
                    f"{self.source}: {key}: has {len(getattr(self, name))} entries but "
                    f"input_lens has {n}; every per-request list must have one entry per request"
                )
        if n == 0:
            raise SpecplanError(f"{self.source}: input_lens: no requests in the result")
        if not (self.request_rate > 0):
            raise SpecplanError(f"{self.source}: request_rate: must be > 0 or \"inf\", got {self.request_rate}")
        if not (self.burstiness > 0 and math.isfinite(self.burstiness)):
            raise SpecplanError(f"{self.source}: burstiness: must be a finite number > 0, got {self.burstiness}")
        rate, b = self.request_rate, self.burstiness
        if math.isfinite(rate) and not (rate * b > 0 and math.isfinite(1.0 / (rate * b)) and math.isfinite(n / rate)):
            raise SpecplanError(
                f"{self.source}: request_rate {rate:g} with burstiness {b:g} and {n} requests: send "
                "times beyond floating point (the mean gap 1/(rate*burstiness) or the schedule "
                "n/rate overflows); valid: a rate of requests per second vLLM could have sent at")

    @property
    def num_requests(self) -> int:
        return len(self.input_lens)

    @property
    def itl_counts(self) -> tuple[int, ...]:
        """ITL entries of each request: one fewer than its streamed chunks."""
        return tuple(len(x) for x in self.itls_s)

    @property
    def succeeded(self) -> np.ndarray:
        """Boolean mask of requests without an error (vLLM's ``success``)."""
        return np.array([not e for e in self.errors], dtype=bool)

    @property
    def open_loop(self) -> bool:
        """True when arrivals did not depend on completions (no concurrency cap, finite rate)."""
        return self.max_concurrency is None and math.isfinite(self.request_rate)

    def requests_frame(self) -> pl.DataFrame:
        """One row per request: lengths, TTFT, E2EL, TPOT, ITL count and longest gap (seconds).

        TPOT follows vLLM: ``(latency - ttft) / (output_len - 1)`` for outputs longer than one
        token, null otherwise. ``max_pause_s`` is the longest gap between two streamed chunks.
        """
        rows: dict[str, list[Any]] = {
            "id": [], "prompt_tokens": [], "output_tokens": [], "success": [], "ttft_s": [],
            "e2el_s": [], "tpot_s": [], "num_chunks": [], "max_pause_s": [],
        }
        for i in range(self.num_requests):
            ok = not self.errors[i]
            itl = self.itls_s[i]
            e2el = self.ttfts_s[i] + float(sum(itl))
            out = self.output_lens[i]
            rows["id"].append(i)
            rows["prompt_tokens"].append(self.input_lens[i])
            rows["output_tokens"].append(out)
            rows["success"].append(ok)
            rows["ttft_s"].append(self.ttfts_s[i] if ok else None)
            rows["e2el_s"].append(e2el if ok else None)
            rows["tpot_s"].append((e2el - self.ttfts_s[i]) / (out - 1) if ok and out > 1 else None)
            rows["num_chunks"].append(len(itl) + 1 if ok else 0)
            rows["max_pause_s"].append(max(itl) if ok and itl else (0.0 if ok else None))
        return pl.DataFrame(
            rows,
            schema={
                "id": pl.Int64, "prompt_tokens": pl.Int64, "output_tokens": pl.Int64,
                "success": pl.Boolean, "ttft_s": pl.Float64, "e2el_s": pl.Float64,
                "tpot_s": pl.Float64, "num_chunks": pl.Int64, "max_pause_s": pl.Float64,
            },
        )

    def itl_values_s(self) -> np.ndarray:
        """Every inter-chunk gap of every successful request, flattened (vLLM's ITL sample)."""
        vals = [g for ok, itl in zip(self.succeeded, self.itls_s, strict=True) if ok for g in itl]
        return np.asarray(vals, dtype=float)

    def arrival_times(self, rng: np.random.Generator) -> np.ndarray:
        """Arrival times drawn as `vllm bench serve` draws them (vLLM saves none).

        Gamma gaps with shape ``burstiness`` and scale ``1/(rate·burstiness)``, cumulated, then
        rescaled so the last request is sent at exactly ``n / rate`` (vLLM's normalisation
        since its ramp-up support). An infinite rate sends everything at t = 0.
        """
        n = self.num_requests
        if not math.isfinite(self.request_rate):
            return np.zeros(n)
        gaps = rng.gamma(shape=self.burstiness, scale=1.0 / (self.request_rate * self.burstiness), size=n)
        t = np.cumsum(gaps)
        if t[-1] > 0:
            t = t * ((n / self.request_rate) / t[-1])
        return t


def _number(obj: dict[str, Any], key: str, source: str, default: float | None = None) -> float:
    if key not in obj:
        if default is None:
            raise SpecplanError(f"{where(source, key)}: missing; `vllm bench serve --save-result` writes it")
        return default
    raw = obj[key]
    if raw == "inf" or raw == "Infinity":
        return math.inf
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise SpecplanError(f"{where(source, key)}: expected a number or \"inf\", got {echo(raw, 60)}")
    return float(raw)


def _duration(obj: dict[str, Any], source: str) -> float | None:
    """vLLM's ``duration`` when it is a positive finite number; None (unknown) otherwise."""
    if obj.get("duration") is None:
        return None
    d = _number(obj, "duration", source)
    return d if math.isfinite(d) and d > 0 else None


def _int_list(obj: dict[str, Any], key: str, source: str) -> tuple[int, ...]:
    vals = obj[key]
    if not isinstance(vals, list):
        raise SpecplanError(f"{where(source, key)}: expected a list, got {type(vals).__name__}")
    out = []
    for i, v in enumerate(vals):
        if isinstance(v, bool) or not isinstance(v, int | float) or v < 0 or int(v) != v:
            raise SpecplanError(f"{where(source, f'{key}[{i}]')}: expected an integer >= 0, got {echo(v, 60)}")
        out.append(int(v))
    return tuple(out)


def _float_list(vals: Any, key: str, source: str) -> tuple[float, ...]:
    if not isinstance(vals, list):
        raise SpecplanError(f"{where(source, key)}: expected a list, got {type(vals).__name__}")
    out = []
    for i, v in enumerate(vals):
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            raise SpecplanError(f"{where(source, f'{key}[{i}]')}: expected seconds >= 0, got {echo(v, 60)}")
        out.append(float(v))
    return tuple(out)


def parse_result(obj: Any, source: str) -> VllmBenchResult:
    """Validate one result object (already decoded JSON) into a `VllmBenchResult`."""
    if not isinstance(obj, dict):
        raise SpecplanError(f"{source}: expected a JSON object, got {type(obj).__name__}")
    check_tree(obj, source, "vLLM results", floats=False)  # integers within ±2**53
    missing = [k for k in DETAILED_KEYS if k not in obj]
    if missing:
        raise SpecplanError(
            f"{source}: missing {', '.join(missing)}; rerun `vllm bench serve` with "
            "--save-result --save-detailed so per-request results are saved"
        )
    itls_raw = obj["itls"]
    if not isinstance(itls_raw, list):
        raise SpecplanError(f"{where(source, 'itls')}: expected a list of lists of seconds")
    itls = tuple(_float_list(v, f"itls[{i}]", source) for i, v in enumerate(itls_raw))
    n = len(itls)
    errors_raw = obj.get("errors", [""] * n)
    if not isinstance(errors_raw, list):
        raise SpecplanError(f"{where(source, 'errors')}: expected a list of strings")
    errors = tuple("" if e is None else str(e) for e in errors_raw)
    max_conc = obj.get("max_concurrency")
    if max_conc is not None and (isinstance(max_conc, bool) or not isinstance(max_conc, int)):
        raise SpecplanError(f"{where(source, 'max_concurrency')}: expected an integer or null, got {echo(max_conc, 60)}")
    summary = {
        k: float(v)
        for k, v in obj.items()
        if k not in DETAILED_KEYS and isinstance(v, int | float) and not isinstance(v, bool)
    }
    return VllmBenchResult(
        source=source,
        request_rate=_number(obj, "request_rate", source),
        burstiness=_number(obj, "burstiness", source, default=1.0),
        duration_s=_duration(obj, source),
        input_lens=_int_list(obj, "input_lens", source),
        output_lens=_int_list(obj, "output_lens", source),
        ttfts_s=_float_list(obj["ttfts"], "ttfts", source),
        itls_s=itls,
        errors=errors,
        max_concurrency=max_conc,
        model_id=str(obj.get("model_id", "")),
        backend=str(obj.get("backend", obj.get("endpoint_type", ""))),
        date=str(obj.get("date", "")),
        summary=summary,
    )


def load_vllm_results(path: str | Path) -> list[VllmBenchResult]:
    """Read every run in a `--save-result` file (one object, or one per line with --append-result)."""
    p = Path(path)
    text = read_text_limited(p, "vLLM results")
    check_nesting(text, p, "JSON", toml=False)
    decoder = json.JSONDecoder()
    objects: list[tuple[Any, int]] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            break
        line = text.count("\n", 0, pos) + 1
        try:
            obj, end = decoder.raw_decode(text, pos)
        except (RecursionError, ValueError) as exc:  # the error's own line for a syntax error
            raise decode_failure(exc, p, 0 if isinstance(exc, json.JSONDecodeError) else line,
                                 "integers within ±2**53") from None
        objects.append((obj, line))
        pos = end
    if not objects:
        raise SpecplanError(f"{p}: empty file; expected the JSON that `vllm bench serve --save-result` writes")
    if len(objects) == 1:
        return [parse_result(objects[0][0], str(p))]
    return [parse_result(obj, f"{p}:{line} (run {i})") for i, (obj, line) in enumerate(objects)]
