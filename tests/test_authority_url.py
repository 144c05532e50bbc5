"""The authority's URL: checked before any connection, and its password never shown — whatever the
password holds (property-based: Hypothesis writes the passwords)."""
from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lib.authority.url import AuthoritySettingError, AuthorityURLError, check_cluster, check_url, redact, shown

passwords = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=4, max_size=40)


@settings(max_examples=200, deadline=None)
@given(password=passwords, port=st.sampled_from(["5432", "notaport", "99999999999"]),
       tail=st.sampled_from(["/gate", "", "/gate?sslmod=x", "/gate?sslmode=require"]))
def test_no_message_or_shown_url_holds_the_password(password, port, tail):
    url = f"postgresql://gate:{quote(password, safe='')}@db.example.org:{port}{tail}"
    assert password not in shown(url) and quote(password, safe="") not in shown(url)
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
