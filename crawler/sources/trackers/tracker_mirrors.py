"""Trackers that mirror each other: one announce where two would list the same peers.

A torrent names several trackers, and distinct services (other hosts, other
ports) often hold the very same swarm: one tracker behind two names, a UDP
and an HTTP face on different ports of one store, or two trackers every
client of the swarm announces to. Announcing to each costs two requests per
tracker (the announce and its withdrawal) for no peer more, and on a
catalogue where most swarms are empty those announces are most of what a
visit costs the trackers (scrapes already carry 74 torrents a packet).

A pair is learned from what the trackers hand out, never assumed:

- after a visit that announced to both, each answer complete (fewer entries
  than its max: the whole swarm as the tracker sees it) and holding at least
  one peer, identical peer sets count one agreement; any difference forgets
  the pair. ``LEARN`` agreements in a row make it a mirror.
- a visit then announces to only one of two mirrors (one without a rate of
  its own before one with: a capped tracker makes the visit wait, and was
  capped for a reason; then UDP, HTTPS, HTTP; then the order given) when
  their scrapes of this torrent, asked on the same visit, report the same
  seeders, leechers and completed downloads.
  Counts that differ, or a tracker without counts, and both are asked.
- every ``CHECK_EVERY``-th time a pair would stand in for the other, both
  are asked, so a pair that drifts apart is found and forgotten.

Kept per process (an ``Lru`` of pairs): each worker learns from its own
visits, in a few of them. What the rule can still miss: two trackers that
agreed ``LEARN`` times in a row, report equal counts for a torrent, and yet
list different peers for it; docs/sources.md weighs it.
"""

from __future__ import annotations

from crawler.sources.lru import Lru
from crawler.sources.result import SourceResult
from crawler.sources.trackers.http_scrape import ScrapeCounts
from crawler.sources.trackers.tracker_urls import PREFERENCE, tracker_of, url_parts

# Agreements in a row that make two trackers mirrors.
LEARN = 4
# One of this many would-be stand-ins asks both trackers instead, to check.
CHECK_EVERY = 16


def _pair(a: str, b: str) -> tuple[str, str]:
    """The key of two tracker URLs' pair: their services (``tracker_of``), in a fixed order."""
    x, y = repr(tracker_of(a)), repr(tracker_of(b))
    return (x, y) if x <= y else (y, x)


class Mirrors:
    """The mirror pairs one worker process learned (module note); ``cache_size`` pairs at most;
    ``capped``: the tracker URLs with a rate of their own (asked last of a pair)."""

    def __init__(self, cache_size: int, capped: frozenset[str] = frozenset()):
        self.capped = capped
        # pair -> [agreements in a row, stand-ins since the last check]
        self.pairs: Lru[tuple[str, str], list[int]] = Lru(cache_size)
        self.stood_in = self.checked = 0  # figures: announces saved, checks made

    def stand_ins(self, urls: list[str], counts: dict[str, ScrapeCounts]) -> dict[str, str]:
        """Which of ``urls`` (to be announced to) a mirror stands in for: URL -> the URL announced to
        in its place. ``counts``: each URL's scrape of this torrent."""
        out: dict[str, str] = {}
        kept: list[str] = []
        for u in sorted(urls, key=lambda u: (u in self.capped, PREFERENCE.get(url_parts(u)[0], len(PREFERENCE)))):
            mine = counts.get(u)
            standing = None
            if mine is not None:
                standing = next((k for k in kept if counts.get(k) == mine and self._stands_in(k, u)), None)
            if standing is None:
                kept.append(u)
            else:
                out[u] = standing
        return out

    def _stands_in(self, kept: str, other: str) -> bool:
        """True when ``kept``'s announce may stand in for ``other``'s (a learned pair, not due a check)."""
        state = self.pairs.get(_pair(kept, other))
        if state is None or state[0] < LEARN:
            return False
        state[1] += 1
        if state[1] >= CHECK_EVERY:
            state[1] = 0
            self.checked += 1
            return False
        self.stood_in += 1
        return True

    def learn(self, results: list[SourceResult]) -> None:
        """What one visit's announces show: each pair of complete answers with peers agrees or not."""
        whole = [r for r in results if r.ok and r.asked == "announce" and r.source != "dht"
                 and r.peers and not r.full]
        for i, a in enumerate(whole):
            for b in whole[i + 1:]:
                key = _pair(a.source, b.source)
                if key[0] == key[1]:
                    continue
                if a.peers == b.peers:
                    state = self.pairs.get(key) or [0, 0]
                    state[0] += 1
                    self.pairs[key] = state
                else:
                    self.pairs.pop(key, None)
