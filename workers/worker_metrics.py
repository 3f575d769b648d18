"""``/metrics`` of one worker process (``PEERCRAWL_METRICS_PORT``, contract §10).

What this process did since it started, as Prometheus counters and
histograms: visits by state, peers found and new, tracker announces by
outcome (answered, refused, failed, backing off), tracker scrapes by outcome
(empty, so not announced to; announce; refused, failed, backing off), DHT lookups, how long
recording a visit's peers and claiming torrents take, how long each stage
of a visit holds its slot, and the pool's size;
and what it cost the sources: the requests it sent each tracker by ``kind``
(connect, scrape, announce, withdrawal) and the DHT lookups that traversed
(``crawler.sources.request_counts``, which tells each as it is counted).
The queue's own gauges (states, latency, workers needed) are the
dashboard's ``/metrics``: every worker serving them would count them once
per worker.

Strategy: ``WorkerMetrics`` is the process's ``Observer`` (crawler/observer.py):
the trackers, the DHT, the queue's claims and the batcher call it as things
happen, and a process without a metrics port is built with the quiet one.
Labels are bounded: a visit ``state`` (five values), a tracker
``url`` and an ``outcome`` (four values). A ``url`` is redacted as
``status`` shows it (no passkey or query); the configured default trackers
and the first ``Settings.top_trackers`` other trackers this process announced to
each get their own, every later one is counted as ``url="other"``
(``TrackerLabels``). A process's counters only grow, so a label once given
is kept: a first-come set, not the dashboard's ranking (which a process
would have to read from Redis and whose members change), at most
``defaults + top_trackers + 1`` labels whatever the torrents name.
Each labelled child is looked up once (``Children``): prometheus_client's
``labels()`` takes a lock and checks its values on every call: half of
the ~17 µs a visit's ten stage times cost through it.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from crawler import logs, redact
from crawler.observer import Observer

log = logs.get("worker.metrics")

# Seconds: a Redis round trip is ~0.1-1 ms; a large visit's recording tens of ms.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


# The url label of the announces to every tracker past the labelled ones (no tracker URL is a bare word).
OTHER = "other"


class TrackerLabels:
    """The ``url`` label of a tracker: its redacted URL for the trackers given to ``always`` and
    the first ``room`` others asked, ``OTHER`` for the rest. Holds at most that many URLs."""

    def __init__(self, room: int):
        self._labels: dict[str, str] = {}
        self._left = max(room, 0)

    def always(self, urls) -> None:
        """Give ``urls`` (the configured default trackers) their own label, beside the ``room``."""
        for u in urls:
            self._labels.setdefault(u, redact.url(u))

    def __call__(self, url: str) -> str:
        """The label of ``url``'s announces: one dict lookup once it has one."""
        label = self._labels.get(url)
        if label is not None:
            return label
        if self._left <= 0:
            return OTHER
        self._left -= 1
        label = self._labels[url] = redact.url(url)
        return label

    def __len__(self) -> int:
        return len(self._labels)


class Children(dict):
    """A labelled metric's children by their label values (one value, or a tuple of several), each
    made by ``metric.labels`` the first time: as many as the metric's labels allow (module note)."""

    def __init__(self, metric):
        super().__init__()
        self.metric = metric

    def __missing__(self, values):
        child = self[values] = self.metric.labels(*values) if isinstance(values, tuple) else self.metric.labels(values)
        return child


class WorkerMetrics(Observer):
    """The metrics of one worker process, in their own registry: its ``Observer``.

    ``room``: trackers labelled besides ``always`` (``TrackerLabels``).
    """

    def __init__(self, room: int, always=()):
        self.labels = TrackerLabels(room)
        self.labels.always(always)
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.visits = Counter("peercrawl_worker_visits", "Visits finished, by the torrent's state after it.",
                              ["state"], registry=r)
        self.peers = Counter("peercrawl_worker_peers_found", "Peers returned by the sources, summed per visit.",
                             registry=r)
        self.new = Counter("peercrawl_worker_peers_new", "Peers new to their torrent in the dedupe window.",
                           registry=r)
        self.announces = Counter("peercrawl_worker_tracker_announces", "Tracker announces by outcome.",
                                 ["url", "outcome"], registry=r)
        self.scrapes = Counter("peercrawl_worker_tracker_scrapes",
                               "Tracker scrapes by outcome: empty (so not announced to), announce (peers there, "
                               "or the tracker does not scrape), refused, failed, backing_off.",
                               ["url", "outcome"], registry=r)
        self.dht = Counter("peercrawl_worker_dht_lookups", "DHT get_peers lookups by outcome.", ["outcome"],
                           registry=r)
        self.requests = Counter("peercrawl_worker_tracker_requests",
                                "Requests sent to trackers by kind: connect (UDP), scrape (a UDP datagram or an "
                                "HTTP request), announce, withdrawal (the stopped announce after an announce).",
                                ["url", "kind"], registry=r)
        self.traversals = Counter("peercrawl_worker_dht_traversals",
                                  "DHT lookups that started a get_peers traversal (not those refused before one).",
                                  registry=r)
        self.recording = Histogram("peercrawl_worker_recording_seconds",
                                   "Time to record one visit's peers into the counters.",
                                   buckets=LATENCY_BUCKETS, registry=r)
        self.claiming = Histogram("peercrawl_worker_claim_seconds",
                                  "Time of one claim call (alone, or with the previous visit's completion).",
                                  ["call"], buckets=LATENCY_BUCKETS, registry=r)
        self.stages = Histogram("peercrawl_worker_visit_stage_seconds",
                                "Time a visit held its slot in each stage (workers/visit_stages.py names them), "
                                "and in all (stage \"slot\").",
                                ["stage"], buckets=LATENCY_BUCKETS, registry=r)
        self._visits, self._announces, self._scrapes, self._dht, self._requests, self._claiming, self._stages = (
            Children(m) for m in (self.visits, self.announces, self.scrapes, self.dht, self.requests, self.claiming,
                                  self.stages))
        self.pool = Gauge("peercrawl_worker_pool_size", "Visits the pool runs at a time (autoscale's size).",
                          registry=r)
        self.running = Gauge("peercrawl_worker_visits_in_flight", "Visits running now.", registry=r)

    def visit(self, v) -> None:
        """``Worker.on_visit``."""
        if v.state == "skipped":
            return
        self._visits[v.state].inc()
        self.peers.inc(v.peers)
        self.new.inc(v.new)

    # --- Observer ---------------------------------------------------------
    def announced(self, url: str, result) -> None:
        """By tracker and outcome."""
        self._announces[self.labels(url), _outcome(result, "answered")].inc()

    def scraped(self, url: str, result) -> None:
        """By tracker and outcome (``announce``: the scrape did not settle the visit)."""
        self._scrapes[self.labels(url), "announce" if result is None else _outcome(result, "empty")].inc()

    def sent(self, url: str | None, kind: str, n: int) -> None:
        """Tracker requests by tracker and kind; DHT traversals apart."""
        if url is None:
            self.traversals.inc(n)
        else:
            self._requests[self.labels(url), kind].inc(n)

    def looked_up(self, result) -> None:
        """By outcome."""
        self._dht["answered" if result.ok else "failed"].inc()

    def claimed(self, seconds: float) -> None:
        """Into the claim histogram."""
        self._claiming["claim"].observe(seconds)

    def recorded(self, seconds: float) -> None:
        """Into the recording histogram."""
        self.recording.observe(seconds)

    def visit_stages(self, seconds: dict[str, float], visits: int = 1) -> None:
        """Into the stage histogram, by stage (``Laps.whole``: with their sum as ``slot``), once a visit."""
        stages = self._stages
        for stage, s in seconds.items():
            for _ in range(visits):
                stages[stage].observe(s)

    def watch_pool(self, slots) -> None:
        """The pool's size and its running visits, read from the worker's ``Slots`` when scraped."""
        self.pool.set_function(lambda: slots.target)
        self.running.set_function(lambda: slots.running)


def _outcome(result, ok: str) -> str:
    """A tracker result's outcome label: ``ok`` when it answered."""
    if result.ok:
        return ok
    if result.refused:
        return "refused"
    if (result.error or "").startswith("tracker backing off"):
        return "backing_off"
    return "failed"


def serve(metrics: WorkerMetrics, port: int, host: str = "0.0.0.0"):
    """Serve ``/metrics`` on ``port`` with gevent; None (and one warning) if the port is taken."""
    from gevent.pywsgi import WSGIServer
    from prometheus_client import make_wsgi_app

    server = WSGIServer((host, port), make_wsgi_app(metrics.registry), log=None)
    try:
        server.start()
    except OSError as e:
        log.warning("metrics_port_taken", port=port, error=str(e.strerror or e))
        return None
    log.info("metrics_serving", address=f"http://{host}:{server.address[1]}/metrics")
    return server
