"""Whatever escapes a DHT lookup is the DHT source's failed result, never the visit's crash."""

from __future__ import annotations

from crawler.errors import StoreError
from crawler.settings import Settings
from crawler.sources.dht.dht import DhtSource


def test_an_unexpected_exception_in_a_lookup_is_a_failed_result(monkeypatch):
    settings = Settings(dht_bootstrap=(("127.0.0.97", 9),), dht_listen=(("127.0.0.11", 0),), allow_private=True,
                        dht_timeout=2.0)
    with DhtSource(settings.replace(dht_settle=0.5)) as source:
        source._bootstrapped.set()  # as if bootstrapped, so the lookup reaches the traversal

        def broken(*_):
            raise RuntimeError("libtorrent said something new")

        monkeypatch.setattr(source._pacer, "start", broken)
        r = source.lookup("ab" * 20)
        assert not r.ok and r.error == "RuntimeError: libtorrent said something new"
        assert r.source == "dht" and r.max_peers == settings.dht_max_peers
        # The slot was given back: the next lookup runs (and fails the same way) instead of waiting.
        assert not source.lookup("cd" * 20).ok

        def store_down(*_):
            raise StoreError("redis is gone")

        monkeypatch.setattr(source._pacer, "start", store_down)
        try:
            source.lookup("ef" * 20)
        except StoreError:
            pass
        else:
            raise AssertionError("StoreError (ours) must propagate")
