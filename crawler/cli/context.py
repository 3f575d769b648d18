"""What every command does first: settings, logging, the Redis connection."""

from __future__ import annotations

from dataclasses import dataclass

import redis

from crawler import logs, store
from crawler.keys import Keys
from crawler.settings import Settings


@dataclass
class Context:
    settings: Settings
    client: redis.Redis
    keys: Keys


def open_context(**overrides) -> Context:
    """Settings from the environment (flags in ``overrides``), logging, Redis.

    Raises SettingsError or StoreError, which ``crawler.cli.main`` prints as
    one line.
    """
    settings = Settings.from_env()
    if overrides:
        settings = settings.replace(**overrides)
    logs.configure(settings.log_level, settings.log_format)
    client = store.connect(settings)
    return Context(settings, client, Keys(settings.namespace))
