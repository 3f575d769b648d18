"""Declaring settings (``setting``, ``Var``, ``read_all``, ``markdown_table``) and the parsers of their variables.

Each parser takes the stripped text and returns a value or raises.

``ValueError`` (or ``TypeError``) carries a one-line reason; ``Settings.from_env``
adds the variable's name and the value given. A parser that must not echo the
value (a password in a URL) raises ``SettingsError`` itself. Shared with the
item parser: ``tracker_url``.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crawler.errors import SettingsError, one_line

# Seconds in a day: the unit of the longer defaults and bounds.
DAY = 86400.0


@dataclass(frozen=True)
class Var:
    """One setting's declaration, kept in its dataclass field's metadata.

    ``env``: the variable. ``parse``: text to value (raises ``ValueError``
    with a reason). ``default``: the value when unset; ``derive``, when set,
    makes the unset value from the setting named ``uses`` (and ``parse`` then
    takes that setting too). ``meaning`` and ``shown`` (the default as a reader
    should see it; None: formatted from ``default``) make its README row.
    ``empty_is_value``: a set but empty variable is parsed, not the default.
    ``hide``: the value is never echoed in an error (a key). ``factory``:
    makes the default when it is needed (it depends on the machine).
    """

    env: str
    parse: Callable[..., Any]
    default: Any
    meaning: str
    shown: str | None = None
    empty_is_value: bool = False
    hide: bool = False
    uses: str | None = None
    derive: Callable[[Any], Any] | None = None
    factory: Callable[[], Any] | None = None


def setting(env: str, default: Any, parse: Callable[..., Any], meaning: str, *, factory: Callable[[], Any] | None = None,
            **kw: Any) -> Any:
    """A ``Settings`` field declaring its variable (see ``Var``); ``factory`` makes a default computed at use."""
    var = Var(env, parse, default, meaning, factory=factory, **kw)
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata={"var": var})
    return dataclasses.field(default=default, metadata={"var": var})


def read(env: Mapping[str, str], var: Var, values: Mapping[str, Any]) -> Any:
    """One variable's value: parsed, or its default when unset (or empty, unless ``empty_is_value``)."""
    extra = (values[var.uses],) if var.uses else ()
    raw = env.get(var.env)
    if raw is None or (raw.strip() == "" and not var.empty_is_value):
        if var.derive is not None:
            return var.derive(*extra)
        return var.factory() if var.factory is not None else var.default
    try:
        return var.parse(raw.strip(), *extra)
    except (ValueError, TypeError) as e:
        if var.hide:
            raise SettingsError(f"{var.env}: {e}") from None
        shown = raw if len(raw) <= 60 else raw[:57] + "..."
        raise SettingsError(f"{var.env}: {e} (got {shown!r})") from None


def read_all(env: Mapping[str, str], declared: Iterable[tuple[str, Var]]) -> dict[str, Any]:
    """Every declared setting's value by field name (see ``read``); raises ``SettingsError`` at the first bad one."""
    values: dict[str, Any] = {}
    # Settings that build on another one (``uses``) come after it.
    for name, var in sorted(declared, key=lambda nv: nv[1].uses is not None):
        values[name] = read(env, var, values)
    return values


def markdown_table(declared: Iterable[Var]) -> str:
    """A settings table for README.md: one row per variable (name, meaning, default as ``shown``)."""
    rows = ["| variable | meaning | default |", "|---|---|---|"]
    for var in declared:
        cells = (f"`{var.env}`", var.meaning, shown(var))
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows) + "\n"


def shown(var: Var) -> str:
    """A setting's default as README.md shows it."""
    if var.shown is not None:
        return var.shown
    d = var.default
    if d is None:
        return "unset"
    if isinstance(d, bool):
        return "on" if d else "off"
    if isinstance(d, str):
        return f"`{d}`"
    if isinstance(d, tuple):
        return "`" + ",".join(d) + "`"
    if isinstance(d, float) and d.is_integer():
        return str(int(d))
    return str(d)


def positive_int(v: str) -> int:
    """A whole number above 0."""
    try:
        n = int(v)
    except ValueError:
        raise ValueError("expected a whole number") from None
    if n <= 0:
        raise ValueError("expected a number above 0")
    return n


def bounded_int(lo: int, hi: int) -> Callable[[str], int]:
    """A parser of whole numbers from ``lo`` to ``hi``."""
    def parse(v: str) -> int:
        try:
            n = int(v)
        except ValueError:
            raise ValueError(f"expected a whole number from {lo} to {hi}") from None
        if not lo <= n <= hi:
            raise ValueError(f"expected a whole number from {lo} to {hi}")
        return n

    return parse


def positive_float(v: str) -> float:
    """A finite number above 0."""
    try:
        x = float(v)
    except ValueError:
        raise ValueError("expected a number") from None
    if not x > 0 or x != x or x == float("inf"):
        raise ValueError("expected a finite number above 0")
    return x


def nonnegative_float(v: str) -> float:
    """A finite number of 0 or more."""
    # Any spelling of zero ("0", "0.00", "0e0", "-0") means zero.
    try:
        x = float(v)
    except ValueError:
        raise ValueError("expected a number") from None
    if x == 0:
        return 0.0
    if not x > 0 or x == float("inf"):
        raise ValueError("expected a finite number of 0 or more")
    return x


def bounded_float(lo: float, hi: float) -> Callable[[str], float]:
    """A parser of numbers from ``lo`` to ``hi``."""
    def parse(v: str) -> float:
        try:
            x = float(v)
        except ValueError:
            raise ValueError(f"expected a number from {lo:g} to {hi:g}") from None
        if not lo <= x <= hi:  # NaN fails both
            raise ValueError(f"expected a number from {lo:g} to {hi:g}")
        return x + 0.0  # -0.0 -> 0.0

    return parse


def fraction(v: str) -> float:
    """A number strictly between 0 and 1."""
    x = positive_float(v)
    if x >= 1:
        raise ValueError("expected a number between 0 and 1")
    return x


def auto_or(lo: int, hi: int) -> Callable[[str], int | str]:
    """A parser of ``auto`` (any case) or a whole number from ``lo`` to ``hi``."""
    number = bounded_int(lo, hi)
    return lambda v: "auto" if v.strip().lower() == "auto" else number(v)


pool_size = auto_or(1, 10_000)  # visits at a time
processes = auto_or(1, 256)  # worker processes


def on_off(v: str) -> bool:
    """``on``/``off`` (also 1/0, true/false, yes/no), any case."""
    low = v.lower()
    if low in ("1", "on", "true", "yes"):
        return True
    if low in ("0", "off", "false", "no"):
        return False
    raise ValueError("expected on or off")


def choice(*options: str) -> Callable[[str], str]:
    """A parser of one of ``options``, any case, returned lower-cased."""
    def parse(v: str) -> str:
        if v.lower() not in options:
            raise ValueError("expected one of " + ", ".join(options))
        return v.lower()

    return parse


def nonempty(v: str) -> str:
    """Any text (emptiness is handled by ``read``: an empty variable is unset)."""
    return v


def secret(v: str) -> str:
    """A key or token of at least 16 characters (its setting is declared ``hide``: never echoed)."""
    if len(v) < 16:
        raise ValueError(f"expected at least 16 characters (got {len(v)})")
    return v


def namespace(v: str) -> str:
    """A key prefix: 1-64 letters, digits or ``_ . : -``."""
    if not re.fullmatch(r"[A-Za-z0-9_.:-]{1,64}", v):
        raise ValueError("expected 1-64 letters, digits or _ . : -")
    return v


def path(v: str) -> Path:
    """A path, ``~`` expanded."""
    return Path(v).expanduser()


def existing_file(v: str) -> Path:
    """A path to a file that exists."""
    p = path(v)
    if not p.is_file():
        raise ValueError("no such file")
    return p


def redis_url(v: str) -> str:
    """A ``redis://``, ``rediss://`` or ``unix://`` URL redis-py can use (``crawler.redis_url.check``).

    Raises ``SettingsError`` itself, the URL shown redacted, so a bad port,
    path or query parameter fails at start in one line without the password.
    """
    from crawler.redis_url import check

    return check(v)


def http_url(v: str) -> str:
    """An ``http://`` or ``https://`` URL with a host."""
    if not re.match(r"^https?://[^/\s]+", v):
        raise ValueError("expected an http:// or https:// URL")
    return v


# A host is a bracketed IPv6 literal or a name/IPv4 without brackets or colons;
# the port is 1-5 ASCII digits (``\d`` would take any script's digits).
_TRACKER_RE = re.compile(r"^(udp|http|https)://(\[[0-9A-Fa-f:.]+\]|[^/\s:\[\]]+)(:[0-9]{1,5})?(/\S*)?$", re.IGNORECASE)


# The longest tracker URL taken, in UTF-8 bytes. Real announce URLs, a
# private tracker's passkey included, stay under 300 bytes; a URL is stored
# once per torrent naming it and written again with every health write,
# request count and min-interval note, so a longer one only costs Redis.
MAX_TRACKER_URL = 4096


def tracker_url(v: str) -> str:
    """Validate one tracker URL (udp, http or https); raises ValueError with a one-line reason.

    Besides the URL's shape, refuses what no client can use: unprintable
    characters (a NUL, a control character, a surrogate that Redis could not
    store as UTF-8), a port above 65535, brackets around something that is not
    an IPv6 address, more than ``MAX_TRACKER_URL`` bytes. The scheme is lower-cased.
    """
    shown = one_line(v, 60)
    size = len(v.encode("utf-8", "surrogatepass"))
    if size > MAX_TRACKER_URL:
        raise ValueError(f"tracker URL longer than {MAX_TRACKER_URL} bytes ({size}; real ones are under 300): {shown}")
    if not _TRACKER_RE.match(v):
        raise ValueError(f"not a udp://, http:// or https:// tracker URL: {shown}")
    if not v.isprintable():
        raise ValueError(f"tracker URL holds unprintable characters: {shown}")
    try:
        parts = urllib.parse.urlsplit(v)
        _ = parts.port  # raises ValueError past 65535
        if parts.netloc.startswith("["):
            ipaddress.IPv6Address(parts.hostname)
    except ValueError as e:
        raise ValueError(f"tracker URL {shown}: {e}") from None
    scheme, rest = v.split("://", 1)
    return scheme.lower() + "://" + rest


def trackers(v: str, default_max: int) -> tuple[tuple[str, int, float | None], ...]:
    """``URL``, ``URL|MAXPEERS`` or ``URL|MAXPEERS|RATE`` (MAXPEERS may be empty:
    the default), comma-separated, as (url, max peers, requests per second or None)."""
    out = []
    for part in v.split(","):
        part = part.strip()
        if not part:
            continue
        url, _, rest = part.partition("|")
        maxp, _, rate = rest.partition("|")
        n = default_max
        if maxp.strip():
            try:
                n = int(maxp)
            except ValueError:
                raise ValueError(f"max peers of {url} is not a whole number") from None
            if n <= 0:
                raise ValueError(f"max peers of {url} must be above 0")
        r = None
        if rate.strip():
            try:
                r = announce_rate(rate)
            except ValueError as e:
                raise ValueError(f"rate of {url}: {e}") from None
        out.append((tracker_url(url.strip()), n, r))
    return tuple(out)


# Requests per second a cap may allow: a hundred thousand is far past what
# any crawl sends, and keeps the cap's spacing (whole microseconds) exact
# to 1 in 10.
MAX_ANNOUNCE_RATE = 100_000.0
MIN_ANNOUNCE_RATE = 0.001


def announce_rate(v: str) -> float:
    """Requests per second, from 0.001 (one in ~17 minutes) to 100,000."""
    try:
        x = float(v)
    except ValueError:
        raise ValueError("expected a number of requests per second") from None
    if not MIN_ANNOUNCE_RATE <= x <= MAX_ANNOUNCE_RATE:
        raise ValueError(f"expected requests per second from {MIN_ANNOUNCE_RATE:g} to {MAX_ANNOUNCE_RATE:g}")
    return x


def host_port(v: str) -> tuple[str, int]:
    """``host:port`` (IPv6 in brackets), the port from 0 to 65535."""
    host, sep, port = v.strip().rpartition(":")
    if not sep or not host:
        raise ValueError(f"expected host:port, got {v!r}")
    host = host.strip("[]")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        # A name the resolver cannot even encode (a label over 63 characters, a
        # surrogate) is refused here, not at the first lookup.
        try:
            host.encode("idna")
        except UnicodeError:
            raise ValueError(f"host of {one_line(v, 60)!r} is not a usable host name") from None
    try:
        p = int(port)
    except ValueError:
        raise ValueError(f"port of {v!r} is not a number") from None
    if not 0 <= p <= 65535:
        raise ValueError(f"port of {v!r} is out of range")
    return host, p


def host_ports(v: str) -> tuple[tuple[str, int], ...]:
    """Comma-separated ``host:port`` entries."""
    return tuple(host_port(x) for x in v.split(",") if x.strip())


def listen(v: str) -> tuple[str, int]:
    """``ip:port`` to listen on."""
    host, port = host_port(v)
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise ValueError("expected an IP address:port") from None
    return host, port


def families(v: str) -> tuple[str, ...]:
    """Comma-separated StatHat metric families."""
    fams = tuple(x.strip() for x in v.split(",") if x.strip())
    allowed = {"countries", "torrents", "torrents.count", "torrents.processed"}
    for f in fams:
        if f not in allowed:
            raise ValueError("expected a comma-separated list of " + ", ".join(sorted(allowed)))
    return fams
