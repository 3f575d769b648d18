"""What every command does first: settings, logging, the Redis connection."""

from __future__ import annotations

from dataclasses import dataclass

import redis

from crawler import logs, redis_url
from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.settings import Settings, strays
from crawler.store import connect as store
from crawler.store import layout


@dataclass
class Context:
    """What a command works with: its validated settings, the Redis client and the namespace's key names."""
    settings: Settings
    client: redis.Redis
    keys: Keys


def open_context(records: bool = False, resolve_layout: bool = True, **overrides) -> Context:
    """Settings from the environment (flags in ``overrides``), logging, Redis.

    ``records``: the command records peers (worker, run), so the fingerprint
    key must be usable before it does anything (contract §4). ``resolve_layout``:
    the keys carry the crawl's shard and mark bucket counts (``crawler.store.layout``), which
    refuse a conflicting ``PEERCRAWL_QUEUE_SHARDS`` or ``PEERCRAWL_MARK_BUCKETS`` or a move in progress; off, the
    keys are the namespace's home alone (``reshard`` reads the layout itself).
    Raises SettingsError or StoreError, which ``crawler.cli.main`` prints as
    one line.
    """
    settings = Settings.from_env()
    if overrides:
        settings = settings.replace(**overrides)
    logs.configure(settings.log_level, settings.log_format, hidden=hidden_texts(settings))
    unknown = strays()
    if unknown:
        logs.get("settings").warning("unknown_settings", message="not a setting, ignored: " + "; ".join(unknown))
    client = store.connect(settings)
    keys = (layout.resolve(client, settings.namespace, settings.queue_shards, settings.mark_buckets) if resolve_layout
            else Keys(settings.namespace))
    if records:
        from crawler.counters.fingerprint_key import key_file, load_secret, read_key_file

        try:
            load_secret(client, keys, settings)
        except redis.RedisError as e:
            raise StoreError(f"cannot check the fingerprint key: {e}") from e
        if settings.secret is None and not settings.redis_url:  # the embedded default's generated key
            raw = read_key_file(key_file(settings.data_dir))
            logs.hide(raw.decode("utf-8", "replace").strip() if raw else None)
    return Context(settings, client, keys)


def hidden_texts(settings: Settings) -> list[str]:
    """What no log line of a process with ``settings`` may hold: every hidden setting's value (the
    fingerprint key, the dashboard token, the StatHat key) and the secrets of ``REDIS_URL``."""
    from crawler.settings import declarations

    out = [getattr(settings, name) for name, var in declarations() if var.hide]
    return [t for t in out if isinstance(t, str)] + redis_url.secrets(settings.redis_url)
