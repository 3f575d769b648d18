"""One torrent announced to one tracker, then withdrawn: the exchanges and what their replies mean.

Self-exclusion: the crawler announces as a leecher (``left=1``, event
``started``) so trackers that hide seeders from seeders still show every
peer, on a port that identifies it (``Settings.announce_port``, or one random
high port chosen once per namespace and shared by every worker through
Redis, so a worker killed before its withdrawal leaves an entry the others
recognise as the crawler's, not a peer to count). Its own entry is dropped
from the reply (``SelfFilter``), and it withdraws at once with ``stopped``.
The counts of the ``stopped`` reply are the swarm without us (opentracker
counts the announcer in the first reply); if the withdrawal fails, one
leecher is subtracted when our own entry was listed. The withdrawal is best
effort: one try within ``Settings.udp_timeout``, read for its counts only.

A tracker host with several addresses (A and AAAA records, round-robin DNS)
is tried address after address, every address checked by the address
policy, each try given an equal share of the time left
(``addresses.share_of_time``); only silence moves a torrent on to the next.
The address that answered is tried first next time (``tracker_addresses``).
A UDP tracker's announces go out as one batch (``announce_groups`` forms
them), each followed by its withdrawal as soon as it answered.

Bounds: at most ``Settings.source_peers_bound(max)`` peers are kept of one
reply, the rest counted in tracker health, cut before their entries are
decoded (349,504 entries of a 2 MiB reply block the event loop for a second).

numwant and caps: trackers list the requester in their own replies, so we
ask for max + 1 and keep max real peers. Many trackers clamp numwant to
their own figure (e.g. 82), below our max; such a tracker would never look
"full" (§2). A reply that returned fewer entries than asked while the
tracker's own counts, seeders + leechers - 1 (the - 1: it may count us),
say the swarm is larger shows a cap; tracker health keeps the largest such
reply, and ``min(configured max, learned cap)`` is that tracker's max for
scoring. A cap is never learned below ``MIN_LEARNED_CAP`` entries.
"""

from __future__ import annotations

import time

from crawler import redact
from crawler.errors import StoreError
from crawler.settings import Settings
from crawler.sources.addresses import share_of_time
from crawler.sources.compact_peers import CompactPeers
from crawler.sources.result import SourceResult
from crawler.sources.trackers import udp_codec
from crawler.sources.trackers.health import ANSWER
from crawler.sources.trackers.http_codec import HttpAnnounceReply, announce_url, parse_announce_reply
from crawler.sources.trackers.outcomes import Outcomes
from crawler.sources.trackers.self_filter import SelfFilter
from crawler.sources.trackers.tracker_errors import TrackerTimeout
from crawler.sources.trackers.tracker_urls import url_parts

# Below this many entries a short reply is not taken as a cap: real trackers
# cap at 50 or more, and a tiny learned cap would call small swarms "full".
MIN_LEARNED_CAP = 10


class Announcer:
    """The announce exchanges of one process's ``Trackers`` (module note).

    ``identity``: ``(peer_id, port, key)`` the crawler announces with; the
    others are the ``Trackers``' parts it shares (its UDP client, address
    memory, request counts, health and outcomes, and ``http_body``, the body
    of a 200 GET within a deadline).
    """

    def __init__(self, settings: Settings, identity: tuple[bytes, int, int], *, udp, addresses, udp_targets, requests,
                 outcomes: Outcomes, http_body):
        self.settings, self.udp, self.addresses, self.udp_targets = settings, udp, addresses, udp_targets
        self.peer_id, self.port, self.key = identity
        self.requests, self.outcomes, self.health, self.http_body = requests, outcomes, outcomes.health, http_body
        self.self_filter = SelfFilter(self.port)
        self.stop_timeout = settings.udp_timeout
        self.http_sent = 0  # HTTP announces and withdrawals (figures, beside the UDP client's)

    def udp_many(self, url: str, hashes: list[bytes], deadline: float, deliver) -> None:
        """The UDP exchanges of a batch: ``deliver(i, result)`` for each hash as soon as its
        result is final (its announce answered and its withdrawal ended, or it failed).

        Raises only ``StoreError``; every hash not yet delivered gets the failure.
        """
        configured = self.settings.tracker_max_peers(url)
        delivered: set[int] = set()

        def final(i: int, result: SourceResult) -> None:
            delivered.add(i)
            deliver(i, result)

        def fail_the_rest(result: SourceResult) -> None:
            for i in range(len(hashes)):
                if i not in delivered:
                    final(i, result)

        _, host, port, netloc = url_parts(url)
        if not host or not port:
            return fail_the_rest(self.outcomes.failed(url, "UDP tracker URL lacks a host or port", configured))
        backing_off = self.outcomes.backing_off(url, configured)
        if backing_off is not None:
            return fail_the_rest(backing_off)
        try:
            self._udp_exchanges(url, host, port, netloc, hashes, configured, deadline, final)
        except StoreError:
            raise
        except Exception as e:  # noqa: BLE001 - as in announce: the tracker's (or its name's) failure
            fail_the_rest(self.outcomes.fault(url, e, configured))
        # Every hash is answered above; this guard keeps a caller from waiting for ever if not.
        fail_the_rest(self.outcomes.failed(url, "no announce reply within the visit deadline", configured))

    def _udp_exchanges(self, url: str, host: str, port: int, netloc: str, hashes: list[bytes], configured: int,
                       deadline: float, final) -> None:
        """Announce ``hashes`` to each address of the tracker in turn (only silence moves a
        torrent on to the next address), each answer followed by its withdrawal within
        the stop timeout; ``final(i, result)`` as each hash's result is known."""
        targets = self.udp_targets(url)
        asked = configured + 1  # the tracker may list us in its reply
        common = {"peer_id": self.peer_id, "port": self.port, "num_want": asked, "key": self.key}
        silent: dict[int, list[str]] = {i: [] for i in range(len(hashes))}
        todo = list(range(len(hashes)))
        for k, (family, addr) in enumerate(targets):
            last = k == len(targets) - 1

            def done(j: int, answer, withdrawn, idx=todo, last=last, family=family, addr=addr) -> None:
                i = idx[j]
                if isinstance(answer, TrackerTimeout):
                    silent[i].append(str(answer))
                    if not last:
                        return  # the next address is asked
                    why = silent[i]
                    answer = TrackerTimeout(why[0] if len(why) == 1 else
                                            f"none of its {len(why)} addresses answered: " + "; ".join(why))
                elif len(targets) > 1:
                    self.addresses.good[("udp", host, port)] = (family, addr)
                if isinstance(answer, Exception):
                    final(i, self.outcomes.fault(url, answer, configured))
                else:
                    final(i, self.result(url, hashes[i], configured, asked, answer.peers, answer.cut,
                                          answer.seeders, answer.leechers, withdrawn, float(answer.interval),
                                          None, None, packed=True))

            replies = self.udp.announce_many(
                addr, family, [hashes[i] for i in todo],
                deadline=share_of_time(deadline, time.monotonic(), len(targets) - k),
                event=udp_codec.EVENT_STARTED, limit=self.settings.source_peers_bound(configured),
                withdraw=(self.stop_timeout, deadline), on_done=done, **common)
            todo = [i for i, r in zip(todo, replies) if isinstance(r, TrackerTimeout)]
            if not todo:
                break

    def result(self, url, info_hash, configured, asked, peers, cut, seeders, leechers, stopped, interval,
               min_interval, warning, packed: bool = False):
        """The answer's ``SourceResult``, its health recorded (cut peers, cap evidence). ``peers``: (ip
        text, port) pairs, or (packed ip, port) pairs when ``packed`` (kept so: ``CompactPeers``)."""
        returned = len(peers) + cut  # every entry the tracker handed out, ours included
        peers, own_listed = self.self_filter.strip(peers)
        capped = (
            MIN_LEARNED_CAP <= returned < asked
            and seeders is not None and leechers is not None
            and seeders + leechers - 1 > returned
        )
        self.health.record(url, ANSWER, cut=cut, returned=returned, capped=capped)
        cap = self.health.cap(url)
        max_peers = min(configured, cap) if cap else configured
        if stopped is not None:
            seeders, leechers = stopped
        elif own_listed and leechers:
            leechers -= 1
        return SourceResult(
            source=url, ok=True, peers=CompactPeers(peers) if packed else frozenset(peers), max_peers=max_peers,
            seeders=seeders, leechers=leechers, interval=interval, min_interval=min_interval,
            warning=None if warning is None else redact.text(warning, url), returned=returned,
        )

    def http(self, url: str, info_hash: bytes, configured: int, deadline: float) -> SourceResult:
        """Announce to an HTTP tracker, then withdraw (``http_exchange``); the answer's result."""
        s = self.settings
        asked = configured + 1  # the tracker may list us in its reply
        limit = s.source_peers_bound(configured)

        def get(event: str, until: float, keep: int):
            self.http_sent += 1
            self.requests.sent(url, "withdrawal" if event == "stopped" else "announce")
            u = announce_url(url, info_hash, self.peer_id, self.port, asked, event=event, key=self.key)
            return parse_announce_reply(self.http_body(u, until), keep)

        reply, stopped = http_exchange(get, deadline, s.http_timeout, self.stop_timeout, limit)
        # peers and peers6 were each cut to the bound; together they may still pass it.
        peers, cut = reply.peers[:limit], reply.cut + max(0, len(reply.peers) - limit)
        interval, least = (None if v is None else float(v) for v in (reply.interval, reply.min_interval))
        return self.result(url, info_hash, configured, asked, peers, cut, reply.complete, reply.incomplete,
                            stopped, interval, least, reply.warning)


def http_exchange(get, deadline: float, http_timeout: float, stop_timeout: float,
                  limit: int) -> tuple[HttpAnnounceReply, tuple[int, int] | None]:
    """The announce's reply (``limit`` peers at most) and the withdrawal's (seeders, leechers), or None.

    ``http_timeout`` bounds the announce (redirects included) and
    ``stop_timeout`` the withdrawal, each within ``deadline`` (monotonic).
    Raises what the announce raised; ``StoreError`` from either.
    """
    reply = get("started", min(deadline, time.monotonic() + http_timeout), limit)
    stopped = None
    try:
        r = get("stopped", min(deadline, time.monotonic() + stop_timeout), 0)
        if r.complete is not None and r.incomplete is not None:
            stopped = (r.complete, r.incomplete)
    except StoreError:
        raise
    except Exception:  # noqa: BLE001 - the withdrawal is best effort; the answer stands
        pass
    return reply, stopped
