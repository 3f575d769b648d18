"""Reads and small writes raise ``StoreError`` when Redis cannot be reached (the docstrings' promise).

A real redis-py client pointed at a loopback port nobody listens on; its
retries are off so each refused connection fails at once.
"""

import socket

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.queue.queue import Queue
from crawler.queue.view import QueueView
from crawler.registry.worker_registry import WorkerRegistry
from crawler.report.queue_report import queue_report
from workers.heartbeat import Heartbeat

H = "ab" * 20


@pytest.fixture
def gone() -> redis.Redis:
    """A client for a loopback port that was free a moment ago (connections are refused)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    c = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))
    yield c
    c.close()


def test_every_read_of_the_queue_raises_store_error(gone, settings):
    keys = Keys(settings.namespace)
    view = QueueView(gone, keys)
    reads = {
        "counts": view.counts,
        "quarantined": view.quarantined,
        "next_due": view.next_due,
        "visits_since": view.visits_since,
        "failed visits_since": lambda: view.visits_since(failed=True),
        "state": lambda: view.state(H),
        "torrent": lambda: view.torrent(H),
        "tracked": QueueView(gone, keys).tracked,
        "live workers": lambda: WorkerRegistry(gone, keys).live(0.0),
        "status": lambda: queue_report(Queue(gone, keys, settings), 0.0),
    }
    for name, read in reads.items():
        with pytest.raises(StoreError):
            read()
            pytest.fail(f"{name} returned without Redis")


def test_the_queue_side_tables_and_the_registry_raise_store_error(gone, settings):
    keys = Keys(settings.namespace)
    q = Queue(gone, keys, settings)
    with pytest.raises(StoreError):
        q.plan(H)
    with pytest.raises(StoreError):
        q.hold_trackers(H, {"udp://t.example:1/announce": 5.0}, 60)
    with pytest.raises(StoreError):
        q.trim_visit_buckets()
    registry = WorkerRegistry(gone, keys)
    with pytest.raises(StoreError):
        registry.write("w", {"concurrency": 1}, 15.0, 0.0)
    with pytest.raises(StoreError):
        registry.leave("w")
    with pytest.raises(StoreError):
        Heartbeat(gone, keys, worker_id="w").beat({})
    Heartbeat(gone, keys, worker_id="w").leave()  # a clean shutdown without Redis: its entry expires
