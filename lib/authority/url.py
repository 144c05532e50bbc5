"""The authority's address and this cluster's name. The address: a libpq connection string, either a
URL (`postgresql://ROLE[:PASSWORD]@HOST[:PORT]/DB?sslmode=...`) or key=value pairs
(`host=HOST dbname=DB user=ROLE sslmode=...`), read by libpq itself (psycopg's `conninfo_to_dict`)
and checked before any connection is tried.

It is shown only as libpq read it, rendered again as key=value pairs with its password (and
sslpassword) as *** (`shown_authority`): never the text as written, so nothing of a secret survives a partial
match. A string libpq cannot read (a typo such as `passwd=`, which libpq does not know) is refused
without being shown. Every other text that could carry the string (an error of the driver, a log
line, a message on the command line) goes through `redact`. A password is better kept out of the
string altogether, in the role's `~/.pgpass` (`passfile=`) or `$PGPASSWORD`.
"""
from __future__ import annotations

import re
from urllib.parse import quote

from lib.gate.terms import InputError

HIDDEN = "***"
SECRET_PARAMETERS = ("password", "sslpassword")
NOT_SHOWN = "(not shown: libpq cannot read it, and it may hold a password)"
# libpq's own words for a parameter it does not know: only the name is taken from them
_UNKNOWN = re.compile(r'invalid (?:URI query parameter|connection option):? "([A-Za-z0-9_]{1,64})"')
_FORMS = "a postgresql://ROLE@HOST/DATABASE URL or libpq key=value pairs (host=HOST dbname=DATABASE ...)"


SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")   # libpq's
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


def parameters(conninfo: str) -> dict[str, str]:
    """libpq's parameters of `conninfo` (a URL or key=value pairs), parameter -> value as given;
    AuthorityURLError when libpq cannot read it, naming at most an unknown parameter's name (libpq's
    own message may quote the string, so it is never passed on)."""
    # here: psycopg costs a few hundred ms to import, and only a gate that names an authority needs it
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict
    try:
        return conninfo_to_dict(conninfo)
    except ProgrammingError as exc:
        unknown = _UNKNOWN.search(str(exc))
        if unknown:
            raise AuthorityURLError(f"the authority URL {NOT_SHOWN}: unknown connection parameter "
                                    f"{unknown.group(1)!r}") from None
        raise AuthorityURLError(f"the authority URL {NOT_SHOWN} must be {_FORMS}") from None


def shown_authority(conninfo: str) -> str:
    """`conninfo` as it may be shown: libpq's parameters as key=value pairs, password and sslpassword
    as ***; NOT_SHOWN when libpq cannot read it."""
    from psycopg.conninfo import make_conninfo  # here: as in `parameters`
    try:
        params = parameters(conninfo)
    except AuthorityURLError:
        return NOT_SHOWN
    return make_conninfo("", **{k: HIDDEN if k in SECRET_PARAMETERS else v for k, v in params.items()})


def _written(secret: str) -> set[str]:
    """`secret` and the ways a connection string may spell it: percent-encoded in a URL, escaped in
    a quoted key=value."""
    return {secret, quote(secret, safe=""), quote(secret), secret.replace("\\", "\\\\").replace("'", "\\'")}


def redact(text: str, conninfo: str | None) -> str:
    """`text` with `conninfo` (as written) shown as `shown_authority` does, and each of its secrets (as libpq read
    them, and as a URL or key=value spells them) replaced by ***; when libpq cannot read `conninfo`,
    none of `text` (its secrets are not known)."""
    if not conninfo:
        return text
    try:
        params = parameters(conninfo)
    except AuthorityURLError:
        return NOT_SHOWN
    text = text.replace(conninfo, shown_authority(conninfo))
    secrets = set().union(*(_written(params[k]) for k in SECRET_PARAMETERS if params.get(k)))
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, HIDDEN)
    return text


def _port_problem(port: str) -> str | None:
    """Why libpq's `port` (one per host, comma-separated) is not a port number (libpq reads any text)."""
    for p in port.split(","):
        if p and not (p.isascii() and p.isdigit() and 0 < int(p) < 65536):
            return "port must be a number from 1 to 65535"
    return None


def check_url(url) -> str:
    """`url` (stripped) when it is a libpq connection string this program can use (a URL or key=value
    pairs naming a host and a database); AuthorityURLError saying what is wrong otherwise, showing
    the string only as `shown_authority` does and never echoing one libpq cannot read."""
    if type(url) is not str or not url.strip():
        raise AuthorityURLError("the authority URL is empty: set GATE_AUTHORITY=postgresql://ROLE@HOST/DATABASE")
    url = url.strip()
    params = parameters(url)
    safe = shown_authority(url)
    problem = _port_problem(params.get("port", ""))
    if problem:
        raise AuthorityURLError(f"the authority URL {safe} is malformed: {problem}")
    if params.get("sslmode") is not None and params["sslmode"] not in SSLMODES:
        raise AuthorityURLError(f"the authority URL {safe} has sslmode={params['sslmode']!r}: it must be one of "
                                f"{', '.join(SSLMODES)}")
    if not any(params.get(k) for k in ("host", "hostaddr", "service")):
        raise AuthorityURLError(f"the authority URL {safe} names no host (postgresql://ROLE@HOST/DATABASE)")
    if not any(params.get(k) for k in ("dbname", "service")):
        raise AuthorityURLError(f"the authority URL {safe} names no database (postgresql://ROLE@HOST/DATABASE)")
    return url
