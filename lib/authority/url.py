"""The authority's address and this cluster's name. The address: a libpq URL (`postgresql://ROLE[:PASSWORD]@HOST[:PORT]/DB?sslmode=...`),
checked before any connection is tried, and shown only with its password replaced.

Every text that could carry the URL (an error of the driver, a log line, a message on the command
line) goes through `redact`, so a password never reaches a log, a decision or an error message.
libpq's own settings pass through the query string unchanged (`sslmode`, `sslrootcert`, `sslcert`,
`sslkey`, `connect_timeout`, `passfile`, `options`, ...); a password is better kept out of the URL
altogether, in the role's `~/.pgpass` (`passfile=`) or `$PGPASSWORD`.
"""
from __future__ import annotations

import re
from urllib.parse import parse_qsl, unquote, urlsplit

from lib.gate.terms import InputError

SCHEMES = ("postgresql", "postgres")
HIDDEN = "***"
# libpq parameters a URL may carry (PostgreSQL 15, "Parameter Key Words"); anything else is a typo
PARAMETERS = frozenset((
    "host", "hostaddr", "port", "dbname", "user", "password", "passfile", "channel_binding",
    "connect_timeout", "client_encoding", "options", "application_name", "fallback_application_name",
    "keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout",
    "replication", "gssencmode", "sslmode", "requiressl", "sslcompression", "sslcert", "sslkey",
    "sslpassword", "sslrootcert", "sslcrl", "sslcrldir", "sslsni", "requirepeer",
    "ssl_min_protocol_version", "ssl_max_protocol_version", "krbsrvname", "gsslib", "service",
    "target_session_attrs"))
SECRET_PARAMETERS = ("password", "sslpassword")


CLUSTER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
CLUSTER_RULE = "1-64 characters: letters, digits, '-', '_' or '.', starting with a letter or a digit"


class AuthoritySettingError(InputError):
    """The cluster's authority settings are incomplete or malformed (exit 2 on the command line)."""


class AuthorityURLError(AuthoritySettingError):
    """The authority URL is malformed; the message never holds a password."""


def check_cluster(name) -> str:
    """`name` when it can name a cluster (CLUSTER_RULE); AuthoritySettingError otherwise."""
    if type(name) is not str or not CLUSTER_NAME.fullmatch(name):
        raise AuthoritySettingError(f"GATE_CLUSTER must name this cluster ({CLUSTER_RULE}), got {name!r}")
    return name


def secrets_of(url: str) -> list[str]:
    """The password-like parts of `url` (as written and as decoded), for `redact`."""
    out = []
    try:
        parts = urlsplit(url)
        if parts.password:
            out += [parts.password, unquote(parts.password)]
        for key, value in parse_qsl(parts.query, keep_blank_values=True):
            if key in SECRET_PARAMETERS and value:
                out.append(value)
    except ValueError:
        pass
    # a URL too broken for urlsplit: whatever stands between "user:" and "@"
    m = re.match(r"[A-Za-z]+://[^:/@]*:([^@]*)@", url)
    if m and m.group(1):
        out += [m.group(1), unquote(m.group(1))]
    return sorted({s for s in out if s}, key=len, reverse=True)


def redact(text: str, url: str | None) -> str:
    """`text` with every secret of `url` replaced by ***."""
    if not url:
        return text
    for secret in secrets_of(url):
        text = text.replace(secret, HIDDEN)
    return text


def shown(url: str) -> str:
    """The URL as it may be shown: its password (and sslpassword) as ***."""
    return redact(url, url)


def check_url(url) -> str:
    """`url` when it is a PostgreSQL URL this program can use; AuthorityURLError saying what is wrong
    otherwise (never echoing a password)."""
    if type(url) is not str or not url.strip():
        raise AuthorityURLError("the authority URL is empty: set GATE_AUTHORITY=postgresql://ROLE@HOST/DATABASE")
    url = url.strip()
    safe = shown(url)
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:
        raise AuthorityURLError(f"the authority URL {safe} is malformed: {redact(str(exc), url)}") from None
    if parts.scheme not in SCHEMES:
        raise AuthorityURLError(f"the authority URL {safe} must start with postgresql:// (got scheme "
                                f"{parts.scheme or 'none'!r})")
    query = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=False)
    for key, _ in query:
        if key not in PARAMETERS:
            raise AuthorityURLError(f"the authority URL {safe}: unknown connection parameter {key!r}")
    if not (parts.hostname or any(k in ("host", "hostaddr", "service") for k, _ in query)):
        raise AuthorityURLError(f"the authority URL {safe} names no host (postgresql://ROLE@HOST/DATABASE)")
    if not (parts.path.strip("/") or any(k in ("dbname", "service") for k, _ in query)):
        raise AuthorityURLError(f"the authority URL {safe} names no database (postgresql://ROLE@HOST/DATABASE)")
    return url
