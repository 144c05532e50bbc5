"""Hardening users expect of a shared dashboard: the app listens on loopback unless told otherwise, XSRF
protection stays on, uploads have a size limit (tests/test_auth_browser.py shows the browser's message
for a larger file), and the secrets file (cookie secret, client secret) is never committed."""
from __future__ import annotations

import tomllib

from tests.fixtures_app import ROOT

CONFIG = ROOT / ".streamlit" / "config.toml"


def test_loopback_xsrf_and_the_upload_limit_are_set():
    server = tomllib.loads(CONFIG.read_text(encoding="utf-8"))["server"]
    assert server["address"] == "127.0.0.1"
    assert server["enableXsrfProtection"] is True
    assert server["maxUploadSize"] == 200


def test_the_secrets_file_is_never_committed():
    ignored = (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    assert ".streamlit/secrets.toml" in ignored
    assert not (ROOT / ".streamlit" / "secrets.toml").exists()

