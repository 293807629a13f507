"""Which profile acceptance entry a scenario segment uses: exact (task, language, temperature),
a language ``any`` entry, or a fallback the scenario names; never a silent guess.

``match_segment`` is the nearest-entry lookup the decision rules use to describe a profile;
``resolve_segment`` is the strict one a simulation uses, with a one-line reason when nothing
matches.
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.contracts.profile_acceptance import AcceptanceKey, AcceptanceSegment


def match_segment(segments: Sequence[AcceptanceSegment], key: AcceptanceKey) -> AcceptanceSegment | None:
    """Entry with equal task and language (else language ``any``), nearest temperature (ties: lower)."""
    for language in (key.language, "any"):
        same = [s for s in segments if s.key.task == key.task and s.key.language == language]
        if same:
            return min(same, key=lambda s: (abs(s.key.temperature - key.temperature), s.key.temperature))
    return None


def resolve_segment(
    segments: Sequence[AcceptanceSegment], key: AcceptanceKey, fallback: str | None = None
) -> tuple[AcceptanceSegment | None, str | None]:
    """The entry for ``key``, exactly, or the explicitly named ``fallback``; never a guess.

    Returns ``(segment, note)``: ``note`` is None for an exact match, says which entry was used
    for a fallback (results print it), and is the one-line reason when ``segment`` is None.
    An entry whose language is ``any`` matches every language (it says so itself).
    """
    def find(k: AcceptanceKey) -> AcceptanceSegment | None:
        for language in (k.language, "any"):
            for s in segments:
                if s.key.task == k.task and s.key.language == language and abs(s.key.temperature - k.temperature) < 1e-9:
                    return s
        return None

    seg = find(key)
    if seg is not None:
        return seg, None if seg.key.language == key.language else f"{key} uses the entry {seg.key}"
    same = [s for s in segments if s.key.task == key.task and s.key.language in (key.language, "any")]
    if same:
        temps = ", ".join(sorted({f"{s.key.temperature:g}" for s in same}))
        why = f"temperature {key.temperature:g} has no entry for {key.task}:{key.language}; profile has {temps}"
    else:
        have = ", ".join(str(s.key) for s in segments)
        why = f"task:language {key.task}:{key.language} has no entry; profile has {have}"
    if fallback is None:
        return None, f"{why} (name one with acceptance.fallback = \"task:language:temperature\")"
    parts = fallback.split(":")
    try:
        fkey = AcceptanceKey(parts[0], parts[1], float(parts[2])) if len(parts) == 3 else None
    except ValueError:
        fkey = None
    if fkey is None:
        return None, f"acceptance.fallback {fallback!r}: expected task:language:temperature, e.g. support:en:0.7"
    fseg = find(fkey)
    if fseg is None:
        have = ", ".join(str(s.key) for s in segments)
        return None, f"acceptance.fallback {fallback!r} names no entry; profile has {have}"
    return fseg, f"{why}: using the named fallback entry {fseg.key}"
