"""``REDIS_URL``: which forms and query parameters peercrawl accepts, and how the URL is shown.

The URL is handed to redis-py (``redis.Redis.from_url``), which passes
each query parameter to its connection class as a keyword argument: one
that class does not take fails every command with a ``TypeError``, and
a TLS option on a ``redis://`` URL is silently meaningless. ``check``
refuses both at start in one line, and checks the TLS files exist.

A URL's secrets (the password in the userinfo or in ``?password=``, the
key's ``?ssl_password=``) are never shown: ``shown`` is the URL with its
userinfo and query redacted, ``secrets`` the texts that ``hide`` (and the
log set-up) take out of any message.
"""

from __future__ import annotations

import difflib
import os
import re
import urllib.parse

from crawler import redact
from crawler.errors import SettingsError

SCHEMES = ("redis://", "rediss://", "unix://")

# Query parameters of every URL form, then those of a TCP connection, then
# those of TLS (rediss:// only); redis-py parses each (redis.connection.parse_url).
COMMON_PARAMS = frozenset({"db", "username", "password", "client_name", "socket_timeout",
                           "socket_connect_timeout", "health_check_interval"})
TCP_PARAMS = frozenset({"socket_keepalive"})
TLS_PARAMS = frozenset({"ssl_certfile", "ssl_keyfile", "ssl_ca_certs", "ssl_ca_path", "ssl_cert_reqs",
                        "ssl_check_hostname", "ssl_password", "ssl_ciphers", "ssl_min_version"})
TLS_FILES = ("ssl_certfile", "ssl_keyfile", "ssl_ca_certs")
CERT_REQS = ("none", "optional", "required")
SECRET_PARAMS = ("password", "ssl_password")


def _parts(v: str) -> tuple[str, str, str]:
    """(scheme with ``://``, netloc, query) of ``v``, split as ``urlsplit`` does but never raising."""
    scheme, sep, rest = v.partition("://")
    netloc = re.split(r"[/?#]", rest, maxsplit=1)[0]
    query = rest.partition("#")[0].partition("?")[2]
    return scheme + sep, netloc, query


def _ambiguous(v: str) -> bool:
    """Whether ``v`` holds an ``@`` outside its ``user:password@`` part: a password holding ``/``,
    ``?`` or ``#`` that is not percent-encoded, which no parser reads as the writer meant."""
    return "@" in v.partition("://")[2] and "@" not in _parts(v)[1]


def shown(v: str) -> str:
    """``v`` as it may be printed: userinfo and query redacted (``crawler.redact.url``);
    all but the scheme when ``v`` is ambiguous (see ``_ambiguous``)."""
    if _ambiguous(v):
        scheme, sep, rest = v.partition("://")
        return redact.url(f"{scheme}{sep}{urllib.parse.quote(rest, safe='')}@")
    return redact.url(v)


def secrets(v: str | None) -> list[str]:
    """The texts of URL ``v`` that are never shown, longest first: the userinfo, the password (as
    written and decoded), the query and its passwords; all of ``v`` but the scheme when ambiguous."""
    if not v:
        return []
    if _ambiguous(v):
        return [v.partition("://")[2]]
    _, netloc, query = _parts(v)
    user = netloc.rpartition("@")[0]
    password = user.partition(":")[2]
    out = {user, password, urllib.parse.unquote(password), query}
    for name, value in urllib.parse.parse_qsl(query):
        if name in SECRET_PARAMS:
            out |= {value, urllib.parse.quote(value, safe="")}
    return sorted((s for s in out if s), key=len, reverse=True)


def hide(message: str, v: str | None) -> str:
    """``message`` with every secret of URL ``v`` replaced by ``<hidden>``."""
    for s in secrets(v):
        message = message.replace(s, "<hidden>")
    return message


def check(v: str) -> str:
    """``v`` if redis-py can use it as peercrawl does; else ``SettingsError`` naming what is wrong,
    with the URL shown redacted.

    Checks the scheme, the port, the database number, a unix socket's path
    and each query parameter: known for the URL's form, a TLS file that
    exists, ``ssl_cert_reqs`` one of none/optional/required.
    """
    from redis.connection import parse_url

    def bad(reason: str) -> SettingsError:
        return SettingsError(f"REDIS_URL: {hide(reason, v)} (got {shown(v)!r})")

    if not v.startswith(SCHEMES):
        if "://" not in v:  # perhaps a bare password: never echoed
            raise SettingsError("REDIS_URL: expected a redis://, rediss:// or unix:// URL (got no scheme)")
        raise bad("expected a redis://, rediss:// or unix:// URL")
    if _ambiguous(v):
        raise bad("an '@' outside user:password@; percent-encode '/', '?', '#' and '@' in a password "
                  "(%2F, %3F, %23, %40)")

    try:
        parts = parse_url(v)
        split = urllib.parse.urlsplit(v)
        path, port = split.path, split.port
    except ValueError as e:
        raise bad(str(e)) from None
    unix, tls = v.startswith("unix://"), v.startswith("rediss://")
    if unix and not path:
        raise bad("expected unix:///path/to/redis.sock")
    if not unix:
        if not parts.get("host"):
            raise bad("expected a host")
        if port == 0:
            raise bad("expected a port from 1 to 65535")
        if path not in ("", "/") and "db" not in parts:
            raise bad("expected a database number after the host")
    # a bare ``?word`` (no ``=``) may be a password put in the wrong place: never echoed
    bare = {urllib.parse.unquote_plus(x) for x in split.query.split("&") if x and "=" not in x}
    for name, value in urllib.parse.parse_qsl(split.query, keep_blank_values=True):
        _check_param(name, value, unix, tls, bad, name in bare)
    return v


def _check_param(name: str, value: str, unix: bool, tls: bool, bad, bare: bool = False) -> None:
    """One query parameter of a URL (see ``check``); raises ``bad(reason)``."""
    if name in TLS_PARAMS and not tls:
        raise bad(f"{name!r} needs a rediss:// URL")
    if name in TCP_PARAMS and unix:
        raise bad(f"{name!r} does not apply to a unix:// socket")
    if name not in COMMON_PARAMS | TCP_PARAMS | TLS_PARAMS:
        known = ", ".join(sorted(COMMON_PARAMS | (set() if unix else TCP_PARAMS) | (TLS_PARAMS if tls else set())))
        # A name is echoed only when it reads as a parameter's, given a value: a bare ``?word`` may be
        # a password, and so may anything but a short identifier.
        if bare or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,39}", name):
            raise bad(f"a query part without '=' or that is no parameter name (not shown: it may be a secret); "
                      f"known parameters: {known}")
        close = difflib.get_close_matches(name, sorted(COMMON_PARAMS | TCP_PARAMS | TLS_PARAMS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise bad(f"unknown query parameter {name!r}{hint} (known: {known})")
    if name in TLS_FILES and not os.path.isfile(value):
        raise bad(f"{name}: no such file {value!r}")
    if name == "ssl_ca_path" and not os.path.isdir(value):
        raise bad(f"{name}: no such directory {value!r}")
    if name == "ssl_cert_reqs" and value not in CERT_REQS:
        raise bad(f"{name}: expected one of {', '.join(CERT_REQS)}")
