"""The authority's URL: checked before any connection, and its password never shown — whatever the
password holds (property-based: Hypothesis writes the passwords)."""
from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from lib.authority.url import AuthoritySettingError, AuthorityURLError, check_cluster, check_url, redact, shown_authority

passwords = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=4, max_size=40)


SENTINEL = "\u2603"


def everything_shown(url: str) -> str:
    """The shown form, the check's message and a redacted driver error of `url`, as one text."""
    try:
        check_url(url)
        message = ""
    except AuthorityURLError as exc:
        message = str(exc)
    return " ".join([shown_authority(url), message, redact(f"FATAL: password {SENTINEL!r} rejected for {url}", url)])


@settings(max_examples=200, deadline=None)
@given(password=passwords, port=st.sampled_from(["5432", "notaport", "99999999999"]),
       tail=st.sampled_from(["/gate", "", "/gate?sslmod=x", "/gate?sslmode=require"]))
def test_no_message_or_shown_url_holds_the_password(password, port, tail):
    url = f"postgresql://gate:{quote(password, safe='')}@db.example.org:{port}{tail}"
    # a password that is also a word of what may be shown without it ("port", "gate") cannot be told apart
    blank = f"postgresql://gate:{quote(SENTINEL, safe='')}@db.example.org:{port}{tail}"
    assume(not any(p in everything_shown(blank) for p in {password, quote(password, safe="")}))
    assert password not in shown_authority(url) and quote(password, safe="") not in shown_authority(url)
    try:
        check_url(url)
    except AuthorityURLError as exc:
        assert password not in str(exc) and quote(password, safe="") not in str(exc)
    text = f"FATAL: password {password!r} rejected for {url}"
    assert password not in redact(text, url) and quote(password, safe="") not in redact(text, url)


@pytest.mark.parametrize("url", ["postgresql://gate@db/gate", "postgres://db:5433/gate?sslmode=verify-full",
                                 "postgresql:///gate?host=/run/postgresql"])
def test_a_good_url_passes_unchanged(url):
    assert check_url(url) == url


@pytest.mark.parametrize("name", ["", "-east", "a b", "x" * 65, None, "é"])
def test_a_cluster_name_outside_the_rule_is_refused(name):
    with pytest.raises(AuthoritySettingError, match="GATE_CLUSTER"):
        check_cluster(name)


LEAK = "LEAK7b"


@pytest.mark.parametrize("conninfo, password", [
    (f"postgresql://gate:{LEAK}@db.example.org:5432/gate?sslmode=require", LEAK),
    (f"postgresql://gate@db.example.org/gate?password={LEAK}", LEAK),
    (f"postgresql://gate@db.example.org/gate?sslpassword={LEAK}", LEAK),
    (f"host=db.example.org dbname=gate user=gate password={LEAK}", LEAK),
    (f"host=db.example.org dbname=gate password='{LEAK} \\'x' sslmode=require", f"{LEAK} 'x"),
])
def test_both_forms_are_read_and_shown_without_their_password(conninfo, password):
    assert check_url(conninfo) == conninfo
    assert LEAK not in shown_authority(conninfo) and "password=***" in shown_authority(conninfo)
    assert "host=db.example.org" in shown_authority(conninfo) and "dbname=gate" in shown_authority(conninfo)
    text = f"FATAL: connection to {conninfo} failed for password {password}"
    assert LEAK not in redact(text, conninfo) and "FATAL: connection to" in redact(text, conninfo)


@pytest.mark.parametrize("conninfo, said", [
    (f"postgresql://gate:LEAK7@db/gate?passwd={LEAK}", "unknown connection parameter 'passwd'"),
    (f"host=db dbname=gate passwd={LEAK}", "unknown connection parameter 'passwd'"),
    (f"host=db dbname=gate password={LEAK} oops", "must be a postgresql://"),
    (f"host=db dbname=gate password='{LEAK}", "must be a postgresql://"),
    (f"mysql://gate:{LEAK}@db/gate", "must be a postgresql://"),
    (f"gate:{LEAK}@db/gate", "must be a postgresql://"),
    (f"postgresql://gate:{LEAK}@[::1/gate", "must be a postgresql://"),
    (f"postgresql://gate:{LEAK}@db:99999/gate", "port must be a number"),
    (f"host=db port=x dbname=gate password={LEAK}", "port must be a number"),
    (f"host=db user=gate password={LEAK}", "names no database"),
    (f"dbname=gate password={LEAK}", "names no host"),
])
def test_a_refused_string_is_never_echoed(conninfo, said):
    with pytest.raises(AuthorityURLError, match=said) as info:
        check_url(conninfo)
    message = str(info.value)
    # nothing of the secret, not even around a partial match (`passwd=***b` would tell its end)
    assert "LEAK" not in message and "***b" not in message
    assert "LEAK" not in shown_authority(conninfo) and "LEAK" not in redact(f"error in {conninfo}", conninfo)
