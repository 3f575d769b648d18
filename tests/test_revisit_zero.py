"""PEERCRAWL_REVISIT_SECONDS=0 (contract §8): a visited torrent is due again at once."""

from crawler.queue.queue import Queue
from crawler.queue.scoring import Outcome
from crawler.queue.view import QueueView
from crawler.report.queue_report import capacity_report
from crawler.settings import Settings
from crawler.torrents.items import NewItem

H = "ab" * 20


def test_a_visited_torrent_is_claimable_again_at_once(client, keys, settings):
    q = Queue(client, keys, settings.replace(revisit_seconds=Settings.from_env(
        {"PEERCRAWL_REVISIT_SECONDS": "0.00"}).revisit_seconds))
    view = QueueView(client, keys)
    q.add([NewItem(H)], now=100)
    (lease,) = q.claim(1, now=100)
    q.complete(lease, Outcome.SOME, now=101)
    assert view.state(H, 101)[0] == "ready"
    (again,) = q.claim(1, now=101)
    assert again.info_hash == H and again.score == lease.score * 0.8


def test_capacity_has_no_finite_need_at_revisit_zero():
    report = {"tracked": 10, "visits_last_hour": 100}
    cap = capacity_report(report, [{"id": "w"}], 0.0)["capacity"]
    # every torrent as often as a worker is free: no finite need, no worker count
    assert cap["visits_needed_per_hour"] is None and cap["workers_needed"] is None
    assert cap["visits_per_worker_hour"] == 100
