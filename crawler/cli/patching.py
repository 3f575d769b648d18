"""gevent's monkey-patching, with its plugins looked up once.

``patch_all`` tells each module it patches to gevent's plugins, found
through the ``gevent.plugins.monkey.*`` entry points; gevent looks them up
with ``importlib.metadata.entry_points(group=...)`` at every notice, a
dozen times, and each lookup reads every installed distribution's metadata
again: about a fifth of a worker's start-up CPU. While it patches, that
lookup answers from one reading of every entry point, so a plugin
installed is still called, and the function is put back after. Should gevent
look its plugins up some other way, the reading is only unused.
"""

from __future__ import annotations

from importlib import metadata


def patch() -> None:
    """``gevent.monkey.patch_all()`` unless the socket module is patched already."""
    from gevent import monkey

    if monkey.is_module_patched("socket"):
        return
    lookup = metadata.entry_points
    every = lookup()

    def read_once(**selection):
        return every.select(**selection) if selection else every

    metadata.entry_points = read_once
    try:
        monkey.patch_all()
    finally:
        metadata.entry_points = lookup
