"""Builders for the sign-in and role tests: an access file naming a planner, a vision member and a
viewer, the [auth] secrets section Streamlit reads, and the signed-in users AppTest presents."""
from __future__ import annotations

import contextlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures_app import free_port, serving

PLANNER, MEMBER, VIEWER = "planner@example.org", "member@example.org", "viewer@example.org"
STRANGER = "stranger@example.org"

ACCESS = f"""
[access]
unknown = "none"

[planners]
emails = ["{PLANNER}"]

[viewers]
emails = ["{VIEWER}"]

[teams.vision]
emails = ["{MEMBER}"]
groups = ["team-vision"]
"""

COOKIE_SECRET = "a-test-cookie-secret-that-is-long-enough-0123456789"


def write_access(tmp_path: Path, text: str = ACCESS) -> Path:
    path = tmp_path / "access.toml"
    path.write_text(text, encoding="utf-8")
    return path


def auth_section(provider_url: str = "http://127.0.0.1:9/", port: int = 8501) -> dict:
    """The [auth] section of .streamlit/secrets.toml for an OpenID Connect provider at `provider_url`
    (its discovery document under /.well-known/openid-configuration) and the app on `port`."""
    return {"redirect_uri": f"http://127.0.0.1:{port}/oauth2callback", "cookie_secret": COOKIE_SECRET,
            "client_id": "training-gate", "client_secret": "test-client-secret",
            "server_metadata_url": provider_url.rstrip("/") + "/.well-known/openid-configuration"}


def secrets_toml(section: dict) -> str:
    return "[auth]\n" + "".join(f'{k} = "{v}"\n' for k, v in section.items())


def signed_in(email: str, **claims) -> dict:
    """What AppTest presents as st.user for a signed-in person."""
    return {"is_logged_in": True, "email": email, "sub": email, **claims}


# The identity provider's people: predefined users of oidc-provider-mock, one click each on its
# authorization form. `groups` is the claim the access file reads.
PROVIDER_USERS = [
    {"sub": "planner", "email": PLANNER, "groups": ["capacity-planners"]},
    {"sub": "member", "email": MEMBER, "groups": ["team-vision"]},
    {"sub": "viewer", "email": VIEWER, "groups": []},
]


@contextlib.contextmanager
def oidc_provider(log_path: Path, timeout_s: float = 60.0):
    """oidc-provider-mock (a real OpenID Connect provider) on a free loopback port, serving
    PROVIDER_USERS; yields its base URL. Skips the test, saying why, when it cannot start."""
    if importlib.util.find_spec("oidc_provider_mock") is None:   # run in its own process, never imported here
        pytest.skip("oidc-provider-mock is not installed: `pip install -r requirements.txt`")
    port = free_port()
    args = [sys.executable, "-m", "oidc_provider_mock", "--port", str(port), "--host", "127.0.0.1"]
    for user in PROVIDER_USERS:
        args += ["--user-claims", json.dumps(user)]
    url = f"http://127.0.0.1:{port}"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    with serving(proc, url + "/.well-known/openid-configuration", lambda r: r.status == 200, log_path, timeout_s,
                 lambda why: pytest.skip(f"the OpenID Connect provider {why}")):
        yield url
