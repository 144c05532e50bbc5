"""The app's Streamlit settings (.streamlit/config.toml): users see a viewer's toolbar, not the
developer menu or the Deploy button, and the app still starts with them."""
from __future__ import annotations

import subprocess
import sys
import tomllib
import urllib.request

from tests.fixtures_app import ROOT, fill_ledger, serve_app

CONFIG = ROOT / ".streamlit" / "config.toml"


def test_the_toolbar_is_a_viewers_and_the_other_settings_stay():
    config = tomllib.loads(CONFIG.read_text())
    assert config["client"]["toolbarMode"] == "viewer"
    assert config["server"]["headless"] is True and config["server"]["maxUploadSize"] == 200
    assert config["browser"]["gatherUsageStats"] is False and config["theme"]["base"] == "light"


def test_streamlit_reads_the_setting():
    out = subprocess.run([sys.executable, "-m", "streamlit", "config", "show"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, check=True).stdout
    assert 'toolbarMode = "viewer"' in out


def test_the_app_starts_with_these_settings(tmp_path):
    path = tmp_path / "gate.duckdb"
    fill_ledger(path, n_runs=50)
    with serve_app(path, tmp_path / "streamlit.log") as url:
        with urllib.request.urlopen(url + "/", timeout=10) as r:
            assert r.status == 200
    log = (tmp_path / "streamlit.log").read_text(errors="replace")
    assert "Traceback" not in log and "Error" not in log, log
