"""Announces to one UDP tracker, grouped into one batch while the group forms.

Every announce to one UDP tracker URL that greenlets ask for while a batch for
that URL is forming (one turn of the event loop) goes out in that batch, from
one greenlet (``UdpTrackerClient.announce_many``), each answer followed at
once by its withdrawal; each caller gets its result as soon as its own
exchanges end, never waiting for the batch's slowest. So a worker's dozens of
visits to one tracker cost one greenlet's wake-ups rather than two per visit,
which is what made the tracker layer's cost per announce grow past 64
greenlets (docs/sources.md, "Why one greenlet per torrent slows down past
64"). A batch announces until the earliest of its callers' deadlines (they
differ by the milliseconds of that one turn).
"""

from __future__ import annotations

from gevent.event import AsyncResult

from crawler import spawning
from crawler.errors import StoreError
from crawler.sources.result import SourceResult


class AnnounceGroups:
    """The groups of announces forming, one per UDP tracker URL, of one ``Trackers``.

    ``announce_many(url, info_hashes, deadline, deliver)`` announces one
    group: it calls ``deliver(i, result)`` for each hash as soon as its result
    is final, and raises only ``StoreError``. ``batches``: groups announced
    (figures for tests and the benchmark).
    """

    def __init__(self, announce_many):
        self._announce_many = announce_many
        # UDP tracker URL -> the announces waiting for its next batch
        self._forming: dict[str, list] = {}
        self.batches = 0

    def join(self, url: str, info_hash: bytes, deadline: float) -> SourceResult:
        """The result of announcing one torrent to the UDP tracker at ``url``, in the batch of every
        announce to ``url`` asked meanwhile."""
        forming = self._forming.get(url)
        if forming is None:
            forming = self._forming[url] = []
            spawning.spawn(self._announce_forming, url)
        done: AsyncResult[SourceResult] = AsyncResult()
        forming.append((info_hash, deadline, done))
        result = done.get()
        assert result is not None  # deliver sets each one's result, or an exception is raised here
        return result

    def _announce_forming(self, url: str) -> None:
        """Announce the batch formed for ``url``; each caller gets its result as soon as it is final."""
        batch = self._forming.pop(url)
        self.batches += 1

        def deliver(i: int, result: SourceResult) -> None:
            batch[i][2].set(result)

        try:
            self._announce_many(url, [b[0] for b in batch], min(b[1] for b in batch), deliver)
        except BaseException as e:
            for *_, done in batch:
                if not done.ready():
                    done.set_exception(e if isinstance(e, StoreError) else StoreError(f"announcing stopped: {e!r}"))
            if not isinstance(e, Exception):
                raise
