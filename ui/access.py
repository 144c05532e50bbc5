"""Who is asking, and what they may do: `who()` is the session's grant (lib.gate.access) — local
mode's single user with every role, or, with [auth] in .streamlit/secrets.toml, the signed-in person's
role from the access file; `require(action)` stops a page, saying why, before it draws anything its
role may not use or that would write on an app exposed beyond loopback without sign-in
(`write_refusal`); `may_open` says which pages the navigation lists (ui.pages).
"""
from __future__ import annotations

import ipaddress

import streamlit as st

from lib.gate.access import AccessFileError, Grant, access_path, everyone, load_access_file, may, resolve
from ui.data import CACHE_TTL_S, data_version
from ui.pages import PAGE_ACTIONS, PAGE_TITLE
from ui.text import as_text

LOCAL_USER = "local"                  # the identity of every write in local mode
LOCAL_MODE = "local mode: single user, every role"
WRITES = ("import", "policy")


def sign_in_configured() -> bool:
    """True when .streamlit/secrets.toml has an [auth] section: every page then requires sign-in
    (st.login) and roles come from the access file. Without it the app is in local mode."""
    try:
        return bool(st.secrets.load_if_toml_exists() and "auth" in st.secrets)
    except Exception:  # noqa: BLE001 - an unreadable secrets file: Streamlit itself reports it
        return False


def listen_address() -> str:
    """The address the server listens on ("" or None in the option: every interface)."""
    return str(st.get_option("server.address") or "")


def listens_on_loopback() -> bool:
    address = listen_address()
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def write_refusal() -> str | None:
    """Why this app must not write (None: it may): it listens beyond the loopback interface with no
    sign-in, so anyone who can reach it could."""
    if sign_in_configured() or listens_on_loopback():
        return None
    return (f"This app listens on {as_text(listen_address() or 'every interface')} without sign-in, so "
            "anyone who can reach it could write: imports and policy exports are off. Configure sign-in "
            "([auth] in .streamlit/secrets.toml, see docs/deploying.md), or listen "
            "on 127.0.0.1 only.")


@st.cache_resource(ttl=CACHE_TTL_S, show_spinner=False, max_entries=4)
def _access(path: str, version: tuple):
    return load_access_file(path)


def _claims() -> dict:
    try:
        return st.user.to_dict()
    except Exception:  # noqa: BLE001 - no user info (outside a session)
        return {}


def who() -> Grant:
    """Who is asking, and what they may do. Local mode (no [auth]): a single user with every role,
    identity "local". With sign-in: the signed-in person's grant from the access file (matched by the
    `email` claim and the group claim the file names). Nobody signed in, a person the file gives no
    role, or a malformed access file: the page shows why (with a Sign in or Sign out button) and
    stops here, before anything else is drawn."""
    if not sign_in_configured():
        return everyone(LOCAL_USER)
    if not _claims().get("is_logged_in"):
        sign_in_screen()
        st.stop()
    path = access_path()
    try:
        access = _access(str(path), data_version(str(path))[:1])
    except AccessFileError as exc:
        st.error("The access file cannot be used, so nobody may enter:\n\n"
                 + "\n".join(f"- {as_text(p)}" for p in exc.problems) + f"\n\n({as_text(exc.path)})")
        st.stop()
    claims = _claims()
    groups = claims.get(access["groups_claim"]) or []
    groups = [groups] if isinstance(groups, str) else [str(g) for g in groups if g is not None]
    email = claims.get("email") if isinstance(claims.get("email"), str) else None
    grant = resolve(access, email=email, groups=groups)
    if email is None:
        grant["identity"] = str(claims.get("sub") or "unknown")
    if grant["role"] is None:
        st.error(f"You are signed in as {as_text(grant['identity'])}, but the access file gives you no "
                 "role here: ask a capacity planner for access.")
        st.button("Sign out", on_click=st.logout, key="sign_out_no_role")
        st.stop()
    return grant


def sign_in_screen() -> None:
    """What a signed-out visitor sees: the title and a Sign in button (st.login)."""
    st.title(PAGE_TITLE)
    st.info("Sign in with your organisation's account to see the capacity dashboards.")
    st.button("Sign in", type="primary", on_click=st.login, key="sign_in")


def signed_out() -> bool:
    """True when sign-in is configured and nobody is signed in in this session."""
    return sign_in_configured() and not _claims().get("is_logged_in")


def may_open(script: str) -> bool:
    """Whether this session's role may use the page `script` (pages/…): what the navigation lists."""
    action = PAGE_ACTIONS.get(script)
    return action is None or may(who(), action)


def require(action: str, team: str | None = None) -> Grant:
    """Stop the page, saying why, unless this session may `action` (lib.gate.access.ACTIONS) — and,
    for a write, unless the app may write at all (write_refusal). Pages call it before drawing
    anything that could write: the check runs on the server, whatever the browser sends."""
    grant = who()
    if not may(grant, action, team):
        what = {"import": "import run history", "policy": "edit or export team policy",
                "what-if": "run the what-if" + (f" for team {team}" if team else "")}.get(action, action)
        st.error(f"Your role ({grant['role'] or 'none'}) may not {as_text(what)}.")
        st.stop()
    refusal = write_refusal() if action in WRITES else None
    if refusal:
        st.error(refusal)
        st.stop()
    return grant


def who_writes(grant: Grant, file_name: str | None = None) -> dict:
    """The lib.ledger.audit.Who of a write from this session: its identity, origin "app"."""
    return {"actor": grant["identity"], "origin": "app", "file_name": file_name}


def who_box(grant: Grant) -> None:
    """The sidebar line saying who is asking: local mode, or the signed-in person, role and Sign out."""
    if not sign_in_configured():
        st.sidebar.caption(LOCAL_MODE)
        return
    teams = f" ({', '.join(grant['teams'])})" if grant["teams"] else ""
    st.sidebar.caption(as_text(f"Signed in as {grant['identity']} · {grant['role']}{teams}"))
    st.sidebar.button("Sign out", on_click=st.logout, key="sign_out")
