"""Figures as a person reads them: UTC dates with their age, durations in words, byte units, long
URLs shortened in the middle. What every command's human output uses; ``--json``
keeps the raw values.
"""

from __future__ import annotations

import datetime
from urllib.parse import urlsplit

NONE = "—"


def moment(ts: float | None, now: float) -> str:
    """A unix time as ``2026-11-28 08:47 UTC (3 min ago)`` or ``(in 5 min)``; ``—`` for None."""
    if ts is None:
        return NONE
    return f"{date(ts)} ({age(ts, now)})"


def date(ts: float) -> str:
    """A unix time as ``2026-11-28 08:47:03 UTC``."""
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def age(ts: float, now: float) -> str:
    """``3 min ago``, ``in 5 min`` or ``now`` (within a second)."""
    gap = now - ts
    if abs(gap) < 1:
        return "now"
    return f"{duration(gap)} ago" if gap > 0 else f"in {duration(-gap)}"


def duration(seconds: float) -> str:
    """``seconds`` in words as an operator reads them: 45 s, 12 min, 7.5 h, 3.2 days."""
    for unit, size in (("days", 86_400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.0f} s"


def size(n: int | None) -> str:
    """A byte count in binary units: ``1.4 GiB``; ``—`` for None."""
    if n is None:
        return NONE
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{n:,} B" if unit == "B" else f"{value:.3g} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def times(n: int) -> str:
    """``once``, ``twice``, ``3 times``."""
    return {1: "once", 2: "twice"}.get(n, f"{n:,} times")


def count(n: int, noun: str) -> str:
    """``1 torrent``, ``2 torrents``, ``12,000 torrents`` (``noun`` takes an ``s``)."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def percent(x: float | None) -> str:
    """A fraction as ``87.5 %``; ``—`` for None."""
    return NONE if x is None else f"{100 * x:.1f} %"


def middle(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters by an ellipsis in its middle (both ends kept)."""
    if len(text) <= width:
        return text
    if width < 3:
        return text[:width]
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]


def url(u: str, width: int = 60) -> str:
    """A (redacted) tracker URL in about ``width`` characters: its scheme, host and port always kept
    whole (they say which tracker it is), the rest shortened in the middle."""
    if len(u) <= width:
        return u
    try:
        parts = urlsplit(u)
        origin = f"{parts.scheme}://{parts.netloc}"
    except ValueError:
        return middle(u, width)
    if not u.startswith(origin) or not parts.netloc:
        return middle(u, width)
    return origin + middle(u[len(origin):], max(2, width - len(origin)))


def value(v) -> str:
    """Any figure as text without a Python repr: None as ``—``, floats shortened, lists joined."""
    if v is None:
        return NONE
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, (list, tuple)):
        return ", ".join(value(x) for x in v) or NONE
    if isinstance(v, dict):
        return ", ".join(f"{k.replace('_', ' ')} {value(x)}" for k, x in v.items()) or NONE
    return str(v)
