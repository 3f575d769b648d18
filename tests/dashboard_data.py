"""A small crawl's worth of data for the dashboard tests, written by the real code.

Counters come from the real ``Recorder`` over a test City database
(``tests/mmdb.py``), the queue from the real ``Queue`` (add, claim,
complete with seeders and leechers): no key is written by hand.
"""

from __future__ import annotations

import calendar
import time
from pathlib import Path

import geo
from crawler.counters import Recorder
from crawler.queue.queue import Queue
from crawler.queue.scoring import Outcome
from crawler.torrents.items import NewItem
from tests.mmdb import write_city_db

# cidr -> (country, city, postcode): several countries so the map has colours,
# names with dots and accents, the 2018 name of the DRC ("Congo"), a small
# state the 110m map has no shape for (Singapore), and a country without cities.
WORLD: dict[str, tuple] = {
    "1.1.1.0/24": ("Germany", "München", "80331"),
    "1.1.2.0/24": ("Germany", "Berlin", "10115"),
    "2.2.2.0/24": ("United States", "St. Louis", "63101"),
    "2.2.3.0/24": ("United States", "New York", "10001"),
    "3.3.3.0/24": ("Ivory Coast", "Yamoussoukro", None),
    "4.4.4.0/24": ("Iceland", None, None),
    "5.5.5.0/24": ("Japan", "東京", "100-0001"),
    "6.6.6.0/24": ("Brazil", "São Paulo", "01000-000"),
    "7.7.7.0/24": ("India", "Mumbai", "400001"),
    "8.8.8.0/24": ("Congo", "Kinshasa", None),
    "11.11.11.0/24": ("Singapore", "Singapore", "018989"),
    "12.12.12.0/24": ("Russia", "Moscow", "101000"),
    "13.13.13.0/24": ("Australia", "Sydney", "2000"),
}

T_MAY = calendar.timegm((2026, 5, 10, 12, 0, 0))
T_JUNE = calendar.timegm((2026, 6, 3, 8, 0, 0))
HASHES = ["ab" * 20, "cd" * 20, "ef" * 20, "0123456789" * 4]
# The names add kept for them (a magnet's dn=, a .torrent's info.name).
NAMES = ["Big Buck Bunny (2008) 1080p", "Sintel 4K", "debian-12.5.0-amd64-netinst.iso", None]


def ips(prefix: str, n: int) -> list[str]:
    """``n`` addresses of the /24 ``prefix`` (e.g. ``"1.1.1"``)."""
    return [f"{prefix}.{i}" for i in range(1, n + 1)]


def record_world(client, keys, settings, tmp: Path) -> dict:
    """Record visits of four torrents over May and June 2026 and complete them in the queue.

    Returns ``{"hashes", "months"}``.
    """
    rec = Recorder(client, keys, settings, geo.open_locator(write_city_db(tmp / "world.mmdb", WORLD)))
    may = {
        HASHES[0]: ips("1.1.1", 9) + ips("1.1.2", 4) + ips("2.2.2", 6) + ips("2.2.3", 3) + ips("5.5.5", 5)
        + ips("6.6.6", 7) + ips("8.8.8", 2) + ips("11.11.11", 2) + ["9.9.9.9"],
        HASHES[1]: ips("1.1.1", 3) + ips("7.7.7", 8) + ips("12.12.12", 5) + ips("4.4.4", 1) + ips("3.3.3", 2),
        HASHES[2]: ips("13.13.13", 4) + ips("2.2.2", 2),
    }
    june = {
        # May's marks are still fresh: only 7.7.7.9-10 and 1.1.2.5-6 are new to their country
        HASHES[0]: ips("1.1.1", 3) + ips("7.7.7", 10),
        HASHES[3]: ips("1.1.2", 6) + ips("6.6.6", 1),
    }
    for when, visits in ((T_MAY, may), (T_JUNE, june)):
        for h, addrs in visits.items():
            rec.record_visit(h, addrs, when)
    q = Queue(client, keys, settings)
    q.add([NewItem(h, name=name) for h, name in zip(HASHES, NAMES, strict=True)], now=time.time() - 10)
    leases = q.claim(len(HASHES), now=time.time())
    for n, lease in enumerate(leases):
        # each visit counted 10 + n of the 25 + 2n peers its tracker reported: its coverage
        q.complete(lease, Outcome.SOME, peers=10 + n, seeders=5 + n, leechers=20 + n, now=time.time(),
                   reported=25 + 2 * n, new=10 + n)
    return {"hashes": HASHES, "months": ["2026-06", "2026-05"]}


def stats_json(env: dict, *args: str) -> list[tuple]:
    """``peercrawl stats ... --json`` as (metric, count) pairs, run in this process.

    The same command and output as the subprocess (tests/cli.py) without a new
    interpreter per call, which many comparisons would otherwise spend.
    """
    import json

    from click.testing import CliRunner

    from crawler.cli import _register, cli

    _register()
    r = CliRunner().invoke(cli, ["stats", *args, "--json"], env=env, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return [(x["metric"], x["count"]) for x in json.loads(r.stdout)]
