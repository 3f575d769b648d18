"""Every REDIS_URL form the README lists, against a real private redis-server, through the real command.

redis://, redis:// with a password, rediss:// with a password and a client
certificate (Debian's redis-server with TLS, certificates made by the
test), unix:// with and without a password: ``add`` then ``status --json``
(and ``worker``, whose client is rebuilt from the first one's connection
settings) read and write the private server, and no output holds the
password. Bad URLs fail at start in one line that hides the password.
"""

from __future__ import annotations

import json

import pytest

from tests import redis_servers
from tests.cli import run, run_json

PASSWORD = "hunter2-redis-pw"
H1, H2 = "a" * 40, "b" * 40

FORMS = [("redis", None), ("redis", PASSWORD), ("rediss", PASSWORD), ("unix", None), ("unix", PASSWORD)]


@pytest.fixture
def private(tmp_path, request):
    form, password = request.param
    srv = redis_servers.start(tmp_path / "redis", form, password)
    yield srv
    srv.stop()


def _no_secret(p, *secrets):
    for s in secrets:
        assert s not in p.stdout and s not in p.stderr, (s, p.stdout[-500:], p.stderr[-1500:])


@pytest.mark.parametrize("private", FORMS, indirect=True, ids=lambda f: f[0] + ("+password" if f[1] else ""))
def test_add_status_and_worker_through_each_url_form(test_env, namespace, client, private):
    env = dict(test_env, REDIS_URL=private.url)
    p = run(env, "add", H1, H2)
    assert p.returncode == 0, p.stderr
    _no_secret(p, PASSWORD)
    p, s = run_json(env, "status")
    assert p.returncode == 0, p.stderr
    assert s["tracked"] == 2 and s["ready"] == 2
    _no_secret(p, PASSWORD)
    # the private server holds the crawl, the shared test Redis nothing of it
    assert private.client.zcard(f"{{{namespace}}}:cooling") + private.client.zcard(f"{{{namespace}}}:ready") == 2
    assert not client.keys(f"{{{namespace}}}*")
    p = run(env, "worker", "--until-idle", timeout=120)  # no source to ask: each torrent is deferred
    assert p.returncode == 0, p.stderr[-2000:]
    _no_secret(p, PASSWORD)
    p, s = run_json(env, "status")
    assert s["tracked"] == 2 and s["in_flight"] == 0 and s["ready"] == 0, s


@pytest.mark.parametrize("private", [("rediss", PASSWORD)], indirect=True, ids=["rediss"])
def test_rediss_without_the_client_certificate_or_with_a_wrong_password_is_one_line(test_env, private):
    base, _, query = private.url.partition("?")
    no_cert = f"{base}?ssl_ca_certs={private.tls.ca}"
    wrong_pw = private.url.replace(PASSWORD, "wrong-password-42")
    for url, says in ((no_cert, "not reachable"), (wrong_pw, "not reachable")):
        p = run(dict(test_env, REDIS_URL=url), "status", "--json")
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
        assert lines[0].startswith("peercrawl: Redis at rediss://<redacted:") and says in lines[0], lines[0]
        _no_secret(p, PASSWORD, "wrong-password-42")
    # and the URL with both reaches it (the server's TLS and AUTH are what refused the others)
    assert run(dict(test_env, REDIS_URL=private.url), "status", "--json").returncode == 0


@pytest.mark.parametrize("url, says", [
    ("redis://:{pw}@127.0.0.1:6379/0?ssl_certfile=/etc/hostname", "'ssl_certfile' needs a rediss:// URL"),
    ("unix://:{pw}@/tmp/redis.sock?socket_keepalive=yes", "'socket_keepalive' does not apply to a unix:// socket"),
    ("redis://127.0.0.1:6379/0?password={pw}&no_such_option=1", "unknown query parameter 'no_such_option'"),
    ("redis://127.0.0.1:6379/0?{pw}", "a query part without '=' or that is no parameter name (not shown"),
    ("redis://:{pw}@127.0.0.1:6379/0?socket_timeot=5", "unknown query parameter 'socket_timeot'; did you mean "
                                                       "'socket_timeout'?"),
    ("redis://:{pw}@127.0.0.1:6379/0?Health_Check=5", "unknown query parameter 'Health_Check'"),
    ("rediss://:{pw}@127.0.0.1:6379/0?ssl_certfile=/no/such/client.pem", "ssl_certfile: no such file '/no/such/client.pem'"),
    ("rediss://:{pw}@127.0.0.1:6379/0?ssl_ca_path=/no/such/dir", "ssl_ca_path: no such directory"),
    ("rediss://:{pw}@127.0.0.1:6379/0?ssl_cert_reqs=always", "ssl_cert_reqs: expected one of none, optional, required"),
    ("redis://:{pw}/x@127.0.0.1:6379/0", "percent-encode '/', '?', '#' and '@' in a password"),
    ("redis://:{pw}#x@127.0.0.1:6379/0", "percent-encode"),
    ("redis://:{pw}?x@127.0.0.1:6379/0", "percent-encode"),
    ("redis://u:{pw}@127.0.0.1:abc/0", "Port could not be cast"),
    ("http://u:{pw}@127.0.0.1:6379/0", "expected a redis://, rediss:// or unix:// URL"),
    ("{pw}", "expected a redis://, rediss:// or unix:// URL (got no scheme)"),
])
def test_a_bad_redis_url_names_what_is_wrong_and_hides_the_password(test_env, url, says):
    p = run(dict(test_env, REDIS_URL=url.format(pw=PASSWORD)), "status")
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert lines[0].startswith("peercrawl: REDIS_URL: ") and says in lines[0], lines[0]
    _no_secret(p, PASSWORD, "hunter2")


def test_a_percent_encoded_password_with_reserved_characters_works(test_env, tmp_path):
    pw = "p/w?x#y@z-hunter2"
    srv = redis_servers.start(tmp_path / "redis", "redis", pw)
    try:
        from urllib.parse import quote

        url = f"redis://:{quote(pw, safe='')}@127.0.0.1:{srv.client.connection_pool.connection_kwargs['port']}/0"
        p = run(dict(test_env, REDIS_URL=url), "status", "--json")
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout)["tracked"] == 0
        _no_secret(p, pw, quote(pw, safe=""), "hunter2")
    finally:
        srv.stop()
