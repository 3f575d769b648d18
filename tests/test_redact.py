"""Redaction of tracker URLs and messages, and the bounded LRU, on any input."""

from __future__ import annotations

import urllib.parse

from hypothesis import given
from hypothesis import strategies as st

from crawler import redact
from crawler.sources.lru import Lru

_KEY = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEF0123456789", min_size=16, max_size=40).filter(
    lambda k: any(c.isdigit() for c in k))


@given(_KEY, st.sampled_from(["udp", "http", "https"]), st.text(max_size=200))
def test_a_passkey_is_gone_from_the_url_and_from_any_message_quoting_it(key, scheme, noise):
    for url in (f"{scheme}://t.example:80/announce?passkey={key}",
                f"{scheme}://{key}@t.example/announce",
                f"{scheme}://t.example/{key}/announce"):
        shown = redact.url(url)
        assert key not in shown and "<redacted:" in shown and "t.example" in shown
        message = f"{noise} {url} and again {key} {noise}"
        if key not in noise:
            assert key not in redact.text(message, url)


@given(st.text(max_size=500), st.text(max_size=200))
def test_any_text_is_redacted_without_raising_and_without_control_characters(message, url):
    out = redact.text(message, url)
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in out)
    redact.url(url)


def test_urls_without_secrets_are_kept_and_two_passkeys_stay_apart():
    assert redact.url("udp://tracker.example:1337/announce") == "udp://tracker.example:1337/announce"
    assert redact.url("http://t.example/announce.php") == "http://t.example/announce.php"
    assert redact.url("dht") == "dht"
    a = redact.url("http://t.example/a?pk=" + urllib.parse.quote("one-0123456789"))
    b = redact.url("http://t.example/a?pk=" + urllib.parse.quote("two-0123456789"))
    assert a != b and a.startswith("http://t.example/a?<redacted:")


@given(st.lists(st.tuples(st.sampled_from(["get", "set", "pop"]), st.integers(0, 30)), max_size=300),
       st.integers(1, 8))
def test_lru_matches_a_model_and_never_exceeds_its_size(ops, size):
    lru: Lru[int, int] = Lru(size)
    model: list[int] = []  # keys, least recent first
    for op, k in ops:
        if op == "set":
            lru[k] = k * 2
            if k in model:
                model.remove(k)
            model.append(k)
            del model[:-size]
        elif op == "get":
            assert lru.get(k) == (k * 2 if k in model else None)
            if k in model:
                model.remove(k)
                model.append(k)
        else:
            assert lru.pop(k) == (k * 2 if k in model else None)
            if k in model:
                model.remove(k)
        assert len(lru) == len(model) <= size
        assert list(lru) == model
