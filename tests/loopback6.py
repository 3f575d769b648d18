"""Extra IPv6 addresses on ``lo`` for tests: distinct IPv6 peers on one machine.

A DHT node records an announcing peer at the address the announce came
from, so IPv6 peers with distinct addresses need distinct source addresses,
and IPv6 loopback is ``::1`` alone (IPv4 has all of 127.0.0.0/8).
``loopback_addresses(ips)`` adds each as a /128 on ``lo`` (``ip -6 addr add
... nodad``: no duplicate address detection, usable at once) and removes
those it added on exit; an address already there is used and left. Where
the process may not change addresses (no CAP_NET_ADMIN, no ``ip``) the test
is skipped with the reason.

``PREFIX`` is the tests' block: unique local (fc00::/7), so no network
beyond a site routes it, and apart from any prefix this machine's own
networks use. Not the documentation range 2001:db8::/32: measured, a
12-node libtorrent swarm on 2001:db8 addresses never settled (routing
tables of 7 to 12 entries, shrinking after 5 s), while on ULA addresses
every node knew the 11 others within 0.5 s, as on 127.0.0.x.
"""

from __future__ import annotations

import shutil
import subprocess
from contextlib import contextmanager

import pytest

PREFIX = "fd7e:5d1a:9c3b:"


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "-6", "addr", *args], capture_output=True, text=True, check=False)


@contextmanager
def loopback_addresses(ips: list[str]):
    """Each of ``ips`` is an address of ``lo`` inside the block (see the module note)."""
    if shutil.which("ip") is None:
        pytest.skip("no `ip` command to add IPv6 addresses to lo")
    added = []
    try:
        for ip in ips:
            r = _ip("add", f"{ip}/128", "dev", "lo", "nodad")
            if r.returncode == 0:
                added.append(ip)
            elif "exists" not in r.stderr:
                pytest.skip(f"cannot add {ip} to lo: {r.stderr.strip()}")
        yield
    finally:
        for ip in added:
            _ip("del", f"{ip}/128", "dev", "lo")
