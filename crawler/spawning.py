"""Greenlets started in an interpreted frame, so that a kill cannot free what a compiled one borrows.

gevent's ``Greenlet.kill`` drops the killed greenlet's function and arguments at once, while the
greenlet still runs (``Greenlet.__free``), and throws ``GreenletExit`` into it later. An
interpreted function holds its arguments in its frame; a function compiled by mypyc (setup.py)
borrows them from its caller, here the greenlet, and would read freed memory as it unwinds. Every
greenlet of the crawler therefore starts in ``_held``, this module's frame, which holds the
function and its arguments until it returns. setup.py never compiles this module, and no other
module starts a greenlet itself (tests/test_compiled_set.py checks both).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gevent
import gevent.pool


def _held(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return fn(*args, **kwargs)


def spawn(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> gevent.Greenlet:
    """``gevent.spawn(fn, *args, **kwargs)``, started in ``_held``."""
    return gevent.spawn(_held, fn, *args, **kwargs)


def spawn_later(seconds: float, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> gevent.Greenlet:
    """``gevent.spawn_later(seconds, fn, ...)``, started in ``_held``."""
    return gevent.spawn_later(seconds, _held, fn, *args, **kwargs)


def greenlet(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> gevent.Greenlet:
    """``gevent.Greenlet(fn, ...)``, not started yet, to run in ``_held``."""
    return gevent.Greenlet(_held, fn, *args, **kwargs)


def spawn_in(group: gevent.pool.Group, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> gevent.Greenlet:
    """``group.spawn(fn, ...)`` (a ``Group`` or ``Pool``), started in ``_held``."""
    return group.spawn(_held, fn, *args, **kwargs)
