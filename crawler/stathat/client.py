"""A small client for StatHat's EZ API (the PyPI ``stathat`` 0.0.2 is Python 2 only).

One ``post`` sends one batch as JSON::

    {"ezkey": "...", "data": [{"stat": "countries.Germany.users", "count": 3},
                              {"stat": "torrents.count", "value": 1234}]}

Standard library only (``urllib``), so it is gevent-friendly once the entry
point has monkey-patched sockets.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from crawler.errors import PeercrawlError


class PostError(PeercrawlError):
    """A post to StatHat failed or was refused; nothing in it can be taken as delivered."""


class EZClient:
    """Posts batches of stats to the EZ API at ``url`` with account key ``ezkey``."""

    def __init__(self, url: str, ezkey: str, timeout: float = 10.0):
        self.url, self.ezkey, self.timeout = url, ezkey, timeout
        self.requests = 0  # posts attempted, for metrics and tests

    def post(self, data: list[dict]) -> None:
        """Post ``data`` (``{"stat", "count"|"value"}`` dicts); raises ``PostError``.

        Success is an HTTP 2xx whose JSON body, if any, does not carry a
        ``status`` other than 200 (StatHat answers ``{"status": 200, "msg": "ok"}``).
        """
        body = json.dumps({"ezkey": self.ezkey, "data": data}, ensure_ascii=False).encode("utf-8")
        req = urllib.request.Request(
            self.url, data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        self.requests += 1
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read(65536)
        except urllib.error.HTTPError as e:
            raise PostError(f"StatHat at {self.url} answered HTTP {e.code}") from e
        except (urllib.error.URLError, OSError) as e:
            raise PostError(f"StatHat at {self.url} is not reachable: {e}") from e
        try:
            reply = json.loads(raw) if raw.strip() else {}
        except ValueError:
            reply = {}
        status = reply.get("status") if isinstance(reply, dict) else None
        if status not in (None, 200):
            raise PostError(f"StatHat refused the post: {reply.get('msg', status)!r}")
