"""One progress bar for a whole profile run, with one ETA over every phase.

Why seconds of estimated work, not points: a timing point at batch 16 costs a hundred of one at
batch 1, and the acceptance phase has no points at all. The bar's total is the run's estimate
(``profiler.grids.budget``); each finished piece advances it by its own estimate, so the bar's rate
(estimated seconds done per real second) corrects the ETA for how far off the probe was.
"""

from __future__ import annotations

from typing import Any


class RunProgress:
    """``phase(label)`` names what runs now; ``advance(seconds)`` marks estimated work done."""

    def __init__(self, total_s: float, *, enabled: bool, done_s: float = 0.0) -> None:
        self.enabled = enabled
        self._bar: Any = None
        if enabled:
            from tqdm import tqdm

            self._bar = tqdm(total=max(round(total_s, 1), 0.1), initial=min(round(done_s, 1), round(total_s, 1)),
                             desc="profile: ", unit="s", dynamic_ncols=True,
                             bar_format="{desc}{percentage:3.0f}%|{bar}| {elapsed} elapsed, ETA {remaining} "
                                        "(estimated work {n:.0f}/{total:.0f} s)")

    def phase(self, label: str) -> None:
        if self._bar is not None:
            self._bar.set_description(label, refresh=False)

    def advance(self, seconds: float) -> None:
        if self._bar is not None and seconds > 0:
            room = self._bar.total - self._bar.n
            self._bar.update(round(min(seconds, max(room, 0.0)), 3))

    def grow(self, seconds: float) -> None:
        """More work than planned (points the grid checks added)."""
        if self._bar is not None and seconds > 0:
            self._bar.total = round(self._bar.total + seconds, 1)
            self._bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
