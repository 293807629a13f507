"""Multi-turn conversations that resend their history, as open-loop requests.

Each arrival of a segment with a ``conversation`` table starts a conversation; turn ``k`` arrives
an exponential gap (mean ``gap_s``) after turn ``k − 1`` whether or not that turn was answered
(open loop: the arrival schedule is fixed before the run), and its prompt is the previous prompt
+ the previous answer + ``user_tokens``. A turn past the run's end is dropped. The first turn's
arrival and lengths are exactly the segment's draws without conversations; the gaps and the later
answers' lengths come from the segment's own child stream, so every candidate of a seed sees the
same conversations and other segments do not move.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from sim.contracts.workload_config import SegmentConfig

Span = tuple[int, int]


def with_turns(arr: dict[str, np.ndarray], segments: Sequence[SegmentConfig], duration_s: float,
               stream: Callable[[int], np.random.Generator]) -> dict[str, np.ndarray]:
    """``arr`` (one row per arrival) with each conversation's later turns added, in arrival
    order, and two more columns: ``conversation`` (one number per conversation, −1: none) and
    ``turn`` (0 for the first). ``stream(g)`` is segment ``g``'s own generator."""
    n = len(arr["arrival_s"])
    cols = {k: [v] for k, v in arr.items()}
    cols["conversation"] = [np.full(n, -1, np.int64)]
    cols["turn"] = [np.zeros(n, np.int64)]
    for g, seg in enumerate(segments):
        conv = seg.conversation
        if conv is None:
            continue
        starts = np.flatnonzero(arr["segment"] == g)
        cols["conversation"][0][starts] = starts
        later = conv.turns - 1
        m = len(starts)
        if later == 0 or m == 0:
            continue
        rng = stream(g)
        assert seg.output_tokens is not None
        t = arr["arrival_s"][starts, None] + np.cumsum(rng.exponential(conv.gap_s, (m, later)), axis=1)
        out = seg.output_tokens.sample(rng, m * later).astype(np.int64).reshape(m, later)
        outs = np.concatenate([arr["output_tokens"][starts, None], out], axis=1)  # every turn's answer
        grow = np.cumsum(outs[:, :-1] + conv.user_tokens, axis=1)
        prompt = arr["prompt_tokens"][starts, None] + grow
        keep = t < duration_s
        cols["arrival_s"].append(t[keep])
        cols["segment"].append(np.full(int(keep.sum()), g, np.int64))
        cols["prompt_tokens"].append(prompt[keep])
        cols["output_tokens"].append(out[keep])
        cols["conversation"].append(np.broadcast_to(starts[:, None], keep.shape)[keep])
        cols["turn"].append(np.broadcast_to(np.arange(1, conv.turns), keep.shape)[keep])
    joined = {k: np.concatenate(v) for k, v in cols.items()}
    order = np.argsort(joined["arrival_s"], kind="stable")
    return {k: v[order] for k, v in joined.items()}


def turn_spans(first: Sequence[tuple[Span, ...]], prompt: np.ndarray, output: np.ndarray,
               conversation: np.ndarray, user_tokens: Sequence[int], segment: np.ndarray,
               base: int) -> list[tuple[Span, ...]]:
    """Each request's prefix spans when its segment holds conversations (``first[i]`` otherwise).

    A first turn keeps its shared spans (cut to its prompt) and names the rest of its prompt as
    its own span; turn ``k`` is turn ``k − 1``'s spans plus one span for the previous answer and
    the user's message, so each turn's spans cover its whole prompt and the next turn resends
    them. Request ``i``'s own span has id ``base − i`` (below every other id of the run)."""
    last: dict[int, tuple[tuple[Span, ...], int, int]] = {}  # conversation -> its latest turn
    out: list[tuple[Span, ...]] = []
    for i, c in enumerate(conversation.tolist()):
        p = int(prompt[i])
        if c < 0:
            out.append(first[i])
            continue
        prev = last.get(c)
        if prev is None:
            spans: list[Span] = []
            room = p
            for h, n in first[i]:
                if room <= 0:
                    break
                spans.append((h, min(n, room)))
                room -= min(n, room)
            if room > 0:
                spans.append((base - i, room))
            mine = tuple(spans)
        else:
            spans_prev, p_prev, o_prev = prev
            added = o_prev + user_tokens[int(segment[i])]
            assert p == p_prev + added, "a turn's prompt is the previous prompt + answer + message"
            mine = (*spans_prev, (base - i, added))
        last[c] = (mine, p, int(output[i]))
        out.append(mine)
    return out
