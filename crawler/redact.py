"""Tracker URLs and texts made safe to show: the one place secrets are taken out.

Private trackers put a passkey in the announce URL: in the query string
(``?passkey=...``), in the userinfo (``http://user:key@host/``) or as a path
segment (``/0123456789abcdef0123456789abcdef/announce``). Whoever reads
``status``, a log or an error message could announce as that user, so every
tracker URL shown anywhere goes through ``url`` and every message that may
quote one through ``text``. The raw URL stays where it is needed (the
announce itself, the keys of tracker health in Redis).

Each redacted part becomes ``<redacted:xxxxxx>``, six hex digits of an
unkeyed BLAKE2b of the part: two URLs of one tracker with different passkeys
stay apart in ``status``, and 24 bits of a digest do not give back a key.

A path segment counts as a secret when it is at least ``PATH_SECRET_LEN``
characters of letters, digits, ``-`` or ``_`` and holds a digit (passkeys
are hex or base64-like; "announce.php" and "announce" are kept).
"""

from __future__ import annotations

import hashlib
import re
import urllib.parse

PATH_SECRET_LEN = 16
_PATH_SECRET = re.compile(rf"[A-Za-z0-9_-]{{{PATH_SECRET_LEN},}}")
# A URL inside free text: scheme, then everything up to white space or a quote.
_URL_IN_TEXT = re.compile(r"(?i)\b(?:udp|https?|rediss?|unix)://[^\s'\"<>]+")
# Control characters (terminal escapes from a hostile tracker's message).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _mark(secret: str) -> str:
    return "<redacted:" + hashlib.blake2b(secret.encode("utf-8", "replace"), digest_size=3).hexdigest() + ">"


def _is_path_secret(segment: str) -> bool:
    return bool(_PATH_SECRET.fullmatch(segment)) and any(c.isdigit() for c in segment)


def _split(u: str) -> tuple[str, str, str, str, str]:
    """(scheme, netloc, path, query, fragment) of ``u``, split as urlsplit does but never raising
    (a bad IPv6 literal or port is still shown, with its secrets redacted)."""
    scheme, _, rest = u.partition("://")
    rest, _, fragment = rest.partition("#")
    rest, _, query = rest.partition("?")
    slash = rest.find("/")
    netloc, path = (rest, "") if slash < 0 else (rest[:slash], rest[slash:])
    return scheme, netloc, path, query, fragment


def secrets(u: str) -> list[str]:
    """The parts of tracker URL ``u`` that ``url`` hides, longest first."""
    _, netloc, path, query, fragment = _split(u)
    out = []
    if "@" in netloc:
        out.append(netloc.rsplit("@", 1)[0])
    out += [s for s in path.split("/") if _is_path_secret(s)]
    if query:
        out.append(query)
        # Each value alone too: a tracker's message may quote just the passkey. A value that is
        # itself a URL (a redirect target) is left to the URL redaction of ``text``.
        out += [v for _, v in urllib.parse.parse_qsl(query, keep_blank_values=False) if len(v) >= 4 and "://" not in v]
    if fragment:
        out.append(fragment)
    return sorted(set(out), key=len, reverse=True)


def url(u: str) -> str:
    """``u`` with its userinfo, secret-looking path segments, query and fragment redacted.

    A name that is not a URL (``"dht"``) comes back as it is.
    """
    if "://" not in u:
        return _CONTROL.sub("?", u)
    scheme, netloc, path, query, fragment = _split(u)
    if "@" in netloc:
        user, host = netloc.rsplit("@", 1)
        netloc = _mark(user) + "@" + host
    path = "/".join(_mark(s) if _is_path_secret(s) else s for s in path.split("/"))
    out = f"{scheme}://{netloc}{path}"
    if query:
        out += "?" + _mark(query)
    if fragment:
        out += "#" + _mark(fragment)
    return _CONTROL.sub("?", out)

def text(message: str, *tracker_urls: str) -> str:
    """``message`` with every URL in it redacted, the secrets of ``tracker_urls`` hidden wherever
    they appear, and control characters replaced by ``?``."""
    message = _URL_IN_TEXT.sub(lambda m: url(m.group(0)), message)
    for u in tracker_urls:
        for s in secrets(u):
            message = message.replace(s, _mark(s))
    return _CONTROL.sub("?", message)
