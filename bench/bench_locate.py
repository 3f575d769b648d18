"""What locating a peer costs on a real GeoLite2 City database: ``geo.Locator`` on the bundled one.

Usage: python bench/bench_locate.py [--addresses 200000] [--cache 100000]

The bench's other worlds place peers with a small City database written by
the tests, whose records hold one English name each and decode in ~3 µs; a
GeoLite2 City record holds eight languages' names, subdivisions and a
location, and takes ~30 µs. This bench measures the locator the crawl runs
(``PEERCRAWL_GEO_CACHE_SIZE`` = ``--cache``) on the database it bundles:

- ``uniform``: ``--addresses`` distinct public IPv4 addresses drawn
  uniformly at random (seeded): every lookup a new address, the sparse end
  of what a crawl meets; ``first_half_us`` and ``second_half_us`` per lookup
  show whether what was read earlier helps later ones;
- ``clustered``: as many distinct addresses, drawn from 2,000 random /16s
  (a crawl's peers crowd into the address blocks of a few thousand ISPs);
- ``repeat_us``: the ``uniform`` addresses looked up again (the LRU's
  answer).

Each figure is CPU time (``time.process_time``) per lookup, in µs, one
process, the code imported from the working directory (so
``bench/compare.py --bench-from-head`` runs each side's own ``geo``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import time

sys.path.insert(0, os.getcwd())

import geo  # noqa: E402 - from the working directory


def public_ipv4(rng: random.Random, block: int | None = None) -> str:
    """A random public-looking IPv4 address (first octet 1-223 but 10 and 127), in /16 ``block`` if given."""
    while True:
        if block is None:
            a, b = rng.randint(1, 223), rng.randint(0, 255)
        else:
            a, b = divmod(block, 256)
        if a not in (10, 127):
            return f"{a}.{b}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
        block = None


def distinct(rng: random.Random, n: int, blocks: list[int] | None) -> list[str]:
    """``n`` distinct addresses, uniform or from ``blocks`` (/16 numbers)."""
    out: dict[str, None] = {}
    while len(out) < n:
        out[public_ipv4(rng, None if blocks is None else rng.choice(blocks))] = None
    return list(out)


def per_lookup_us(locate, addresses: list[str]) -> float:
    """CPU µs per ``locate`` of each of ``addresses``, in order."""
    start = time.process_time()
    for ip in addresses:
        locate(ip)
    return (time.process_time() - start) / len(addresses) * 1e6


def main() -> None:
    """Run both worlds and print the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--addresses", type=int, default=200_000)
    ap.add_argument("--cache", type=int, default=100_000, help="PEERCRAWL_GEO_CACHE_SIZE")
    a = ap.parse_args()
    rng = random.Random(20261128)
    uniform = distinct(rng, a.addresses, None)
    clustered = distinct(rng, a.addresses, [rng.randrange(1 << 16) for _ in range(2000)])
    out: dict = {"addresses": a.addresses, "cache": a.cache}
    half = a.addresses // 2
    for name, addresses in (("uniform", uniform), ("clustered", clustered)):
        with contextlib.redirect_stdout(sys.stderr):  # the bundled database's warning
            loc = geo.open_locator(None, a.cache)
        first, second = per_lookup_us(loc.locate, addresses[:half]), per_lookup_us(loc.locate, addresses[half:])
        out[name] = {"first_half_us": round(first, 3), "second_half_us": round(second, 3),
                     "mean_us": round((first + second) / 2, 3)}
        if name == "uniform":
            out["repeat_us"] = round(per_lookup_us(loc.locate, addresses[-min(half, a.cache):]), 3)
        loc.close()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
