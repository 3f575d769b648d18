"""Shared fixtures: a real Redis, a unique key namespace per test.

Tests never assume the Redis at 6379 is empty: each test gets its own
namespace and every key under it is deleted afterwards. A Redis that cannot be
reached fails the test run; nothing is skipped.
"""

from __future__ import annotations

import os
import uuid

import pytest
import redis

from crawler.keys import Keys
from crawler.settings import Settings
from tests.namespaces import delete_namespace

# One cluster for the whole session: a session fixture imported into several modules would be
# one fixture per module, each starting its own six servers (~11 s apiece).
from tests.redis_cluster import redis_cluster  # noqa: F401 (fixture)

REDIS_URL = os.environ.get("PEERCRAWL_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@pytest.fixture(scope="session")
def redis_url() -> str:
    try:
        redis.Redis.from_url(REDIS_URL).ping()
    except redis.RedisError as e:  # pragma: no cover - CI makes sure one answers
        pytest.fail(f"no Redis at {REDIS_URL} ({e}); .ci/run starts one")
    return REDIS_URL


def _fresh_namespace(redis_url: str):
    """A namespace of its own, deleted when the test ends."""
    ns = "pctest-" + uuid.uuid4().hex[:12]
    yield ns
    delete_namespace(redis.Redis.from_url(redis_url), ns)


@pytest.fixture
def namespace(redis_url):
    yield from _fresh_namespace(redis_url)


@pytest.fixture
def other_namespace(redis_url):
    """A second namespace beside ``namespace``, for a test comparing two crawls."""
    yield from _fresh_namespace(redis_url)


@pytest.fixture
def client(redis_url):
    c = redis.Redis.from_url(redis_url)
    yield c
    c.close()


@pytest.fixture
def keys(namespace) -> Keys:
    return Keys(namespace)


@pytest.fixture
def settings(redis_url, namespace, tmp_path) -> Settings:
    """Settings for a test: the test Redis, its namespace, private addresses allowed."""
    return Settings(
        redis_url=redis_url,
        namespace=namespace,
        data_dir=tmp_path / "data",
        trackers=(),
        dht=False,
        allow_private=True,
        secret="test-secret-0123456789",
        # contract §2's eviction by score alone, which most tests exercise; staged
        # eviction's graces are tested at their defaults in test_staged_eviction.py
        evict_never_seen_seconds=0.0,
        evict_lost_seconds=0.0,
    )


@pytest.fixture
def test_env(redis_url, namespace, tmp_path) -> dict:
    """Environment for running the ``peercrawl`` command in a subprocess."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PEERCRAWL_", "STATHAT_", "GEOIP_"))}
    env.update(
        REDIS_URL=redis_url,
        PEERCRAWL_NAMESPACE=namespace,
        PEERCRAWL_DATA_DIR=str(tmp_path / "data"),
        PEERCRAWL_TRACKERS="",
        PEERCRAWL_DHT="off",
        PEERCRAWL_ALLOW_PRIVATE="1",
        PEERCRAWL_SECRET="test-secret-0123456789",
        PEERCRAWL_LOG_FORMAT="json",
        PEERCRAWL_EVICT_NEVER_SEEN_SECONDS="0",
        PEERCRAWL_EVICT_LOST_SECONDS="0",
    )
    return env
