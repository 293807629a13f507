"""The Dash app frame: one page, its assets, the callbacks and the background-job manager.

``create_app`` builds everything from the folders it may serve (``dashboard.files.Roots``);
the layout is re-read on every page load so a profile or scenario added to the folders shows
up on reload. Long simulations run as Dash background callbacks in a worker process managed by
a ``DiskcacheManager`` whose jobs start in spawned interpreters (``dashboard.jobs``); finished
runs are kept in a second cache next to it so a what-if only re-simulates what it changed. Both live in a temporary folder made when the app is created.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from dash import Dash

from dashboard import callbacks, layout
from dashboard.files import Roots, list_profiles, list_scenarios

ASSETS = Path(__file__).resolve().parent / "assets"


def background_manager(cache_dir: str | Path | None = None) -> Any:
    """A Dash background-callback manager (needs diskcache, multiprocess, psutil) over
    ``cache_dir`` or a fresh temporary folder; its jobs run in spawned spares, never a fork
    (``dashboard.jobs``)."""
    import diskcache

    from dashboard.jobs import WarmSpawnManager

    folder = Path(cache_dir) if cache_dir is not None else Path(tempfile.mkdtemp(prefix="specplan-dash-"))
    return WarmSpawnManager(diskcache.Cache(str(folder)))


def create_app(roots: Roots, *, background: bool = True, cache_dir: str | Path | None = None) -> Dash:
    """The dashboard serving ``roots``; ``background=False`` runs simulations in the request
    (no progress or cancel; for environments without multiprocessing). ``cache_dir`` holds the
    background jobs' results and finished runs for reuse (default: a new temporary folder)."""
    folder = Path(cache_dir) if cache_dir is not None else Path(tempfile.mkdtemp(prefix="specplan-dash-"))
    manager = background_manager(folder / "jobs") if background else None
    app = Dash(
        __name__,
        title="specplan what-ifs",
        assets_folder=str(ASSETS),
        background_callback_manager=manager,
        update_title="specplan · running…",
    )

    def serve_layout() -> Any:
        return layout.page(list_scenarios(roots), list_profiles(roots))

    app.layout = serve_layout
    callbacks.register(app, roots, background=background, manager=manager, run_cache_dir=str(folder / "runs"))
    return app
