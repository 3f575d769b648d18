"""A ``Recorder`` that runs a test's callable at the two points where another writer or a crash
matters: after a visit's probe (``after_probe``) and, with several counter shards, after
its place calls and before its torrent parts (``after_places``)."""

from __future__ import annotations

from collections.abc import Callable

from crawler.counters import Recorder


class InterleavedRecorder(Recorder):
    """``Recorder`` calling ``after_probe`` and ``after_places`` (when set) at those points."""

    after_probe: Callable[[], object] | None = None
    after_places: Callable[[], object] | None = None

    def _probe_many(self, now, parts, first):
        flags = super()._probe_many(now, parts, first)
        if self.after_probe is not None:
            self.after_probe()
        return flags

    def _run_places(self, now, month, calls):
        super()._run_places(now, month, calls)
        if self.after_places is not None:
            self.after_places()
