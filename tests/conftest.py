"""Shared pytest fixtures (each section is owned by the module that uses it)."""

# ==== browser fixtures (dashboard end-to-end tests; owner: dashboard) ====================
# A headless Debian Chromium driven by Selenium 4, and a Dash app served from a background
# thread on 127.0.0.1 with a free port. Tests using them carry @pytest.mark.browser and skip
# with a reason when chromium/chromedriver are absent (`make browser` installs them).

import os as _sp_os
import shutil as _sp_shutil
import socket as _sp_socket
import threading as _sp_threading

import pytest as _sp_pytest

SP_CHROMIUM = _sp_shutil.which("chromium") or _sp_shutil.which("chromium-browser")
SP_CHROMEDRIVER = ("/usr/bin/chromedriver" if _sp_os.path.exists("/usr/bin/chromedriver")
                   else _sp_shutil.which("chromedriver"))


def sp_free_port() -> int:
    with _sp_socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@_sp_pytest.fixture
def browser(tmp_path_factory):
    """A fresh headless Chromium (own profile folder and download folder) for one test."""
    if not SP_CHROMIUM or not SP_CHROMEDRIVER:
        _sp_pytest.skip("chromium/chromedriver not installed (apt-get install chromium chromium-driver, "
                        "or `make browser`)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _sp_pytest.skip("selenium not installed (pip install -r requirements.txt)")
    profile_dir = tmp_path_factory.mktemp("chromium-profile")
    downloads = tmp_path_factory.mktemp("downloads")
    opts = webdriver.ChromeOptions()
    opts.binary_location = SP_CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run", f"--user-data-dir={profile_dir}", "--window-size=1600,1200"):
        opts.add_argument(flag)
    opts.add_experimental_option("prefs", {"download.default_directory": str(downloads),
                                           "download.prompt_for_download": False})
    driver = webdriver.Chrome(service=Service(SP_CHROMEDRIVER), options=opts)
    driver.execute_cdp_cmd("Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    driver.sp_downloads = downloads
    try:
        yield driver
    finally:
        driver.quit()


@_sp_pytest.fixture
def serve_dash():
    """Call with a Dash app; returns its base URL, served from a thread until the test ends."""
    from werkzeug.serving import make_server

    servers = []

    def start(app) -> str:
        port = sp_free_port()
        server = make_server("127.0.0.1", port, app.server, threaded=True)
        thread = _sp_threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        servers.append((server, thread, app))
        return f"http://127.0.0.1:{port}"

    yield start
    for server, thread, app in servers:
        server.shutdown()
        thread.join(timeout=10)
        manager = getattr(app, "_background_manager", None)
        if hasattr(manager, "close"):
            manager.close()  # its waiting spare process (dashboard/jobs.py)

# ==== end of browser fixtures ================================================================


# ==== torch fixtures (tiny-model profiler tests) =============================================


@_sp_pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models are overhead-bound: extra threads only spin on a shared machine.

    Use as ``pytestmark = pytest.mark.usefixtures("one_torch_thread")`` after importorskip.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
