"""The key of the IP fingerprints never lives in Redis (contract §4, docs/operations.md)."""

from __future__ import annotations

import os
import stat
import threading

import pytest

import geo
from crawler.counters import Recorder
from crawler.counters.fingerprint_key import create_key_file, key_file, load_secret, read_key_file
from crawler.errors import SettingsError
from crawler.settings import Settings
from crawler.store import connect as store
from crawler.store import embedded
from tests.cli import run, run_json
from tests.mmdb import write_city_db
from tests.test_cluster import cluster_ns  # noqa: F401 (fixture)
from tests.test_embedded import embedded_env, servers  # noqa: F401 (fixture)

H = "ab" * 20
T0 = 1_715_342_400
LEGACY = "0123456789abcdef" * 4  # a key as found in Redis ({ns}:secret)


def one_line(p) -> str:
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    return lines[0]


@pytest.mark.parametrize("command", [["worker", "--until-idle"], ["run", "--until-idle", "c" * 40]])
def test_with_redis_url_recording_commands_need_the_secret(test_env, command):
    env = {k: v for k, v in test_env.items() if k != "PEERCRAWL_SECRET"}
    p = run(env, *command)
    assert p.returncode == 2
    line = one_line(p)
    assert "PEERCRAWL_SECRET" in line and "secrets.token_hex(32)" in line
    p, s = run_json(env, "status")  # the commands that do not record still work
    assert p.returncode == 0 and s["tracked"] == 0  # run failed before adding anything


def test_the_library_refuses_too(client, keys, settings, tmp_path):
    with pytest.raises(SettingsError, match="PEERCRAWL_SECRET"):
        Recorder(client, keys, settings.replace(secret=None), geo.open_locator(write_city_db(tmp_path / "c.mmdb")))
    assert not client.exists(keys.secret)


def test_the_embedded_default_keeps_its_key_in_an_owner_only_file(tmp_path, embedded_env):  # noqa: F811
    data = tmp_path / "data"
    assert run(embedded_env, "add", "a" * 40).returncode == 0
    p = run(embedded_env, "worker", "--until-idle", timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    path = key_file(data)
    st = path.stat()
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.geteuid()
    key = path.read_bytes()
    assert len(key.strip()) == 64
    client = store.connect(Settings(data_dir=data))
    try:  # nothing of it in Redis
        assert not client.exists("{peercrawl}:secret")
        assert all(key.strip() not in (client.dump(k) or b"") for k in client.keys("*"))
    finally:
        embedded.release(data)
    assert run(embedded_env, "worker", "--until-idle", timeout=120).returncode == 0
    assert path.read_bytes() == key  # the same key the next time


def test_a_key_file_others_can_read_is_refused(tmp_path, embedded_env):  # noqa: F811
    path = key_file(tmp_path / "data")
    assert create_key_file(path, "k" * 32)
    path.chmod(0o644)
    p = run(embedded_env, "worker", "--until-idle", timeout=120)
    assert p.returncode == 2
    line = one_line(p)
    assert str(path) in line and "chmod 600" in line and "0644" in line
    assert servers(tmp_path / "data") == []


def test_racing_processes_agree_on_one_key(tmp_path, client, keys):
    s = Settings(data_dir=tmp_path / "d")
    got, errors = [], []

    def load():
        try:
            got.append(load_secret(client, keys, s))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=load) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(got) == 16 and len(set(got)) == 1
    assert [p.name for p in (tmp_path / "d").iterdir()] == ["fingerprint.key"]  # no temporary files left


def test_a_key_file_with_no_key_is_refused(tmp_path):
    path = key_file(tmp_path)
    assert create_key_file(path, "short")
    with pytest.raises(SettingsError, match="holds no key"):
        read_key_file(path)
    assert not create_key_file(path, "k" * 32)  # never overwritten


def _marks_of_the_legacy_key(client, keys, settings, locator):
    """Marks made with a key kept in Redis ({ns}:secret)."""
    rec = Recorder(client, keys, settings.replace(secret=LEGACY), locator)
    assert rec.record_visit(H, ["1.1.1.1", "2.2.2.2"], T0) == 2
    client.set(keys.secret, LEGACY)


def test_a_key_in_redis_is_refused_then_moved_and_its_marks_stay_valid(client, keys, settings, test_env, tmp_path):
    locator = geo.open_locator(write_city_db(tmp_path / "c.mmdb"))
    _marks_of_the_legacy_key(client, keys, settings, locator)
    env = {k: v for k, v in test_env.items() if k != "PEERCRAWL_SECRET"}
    for command in (["worker", "--until-idle"], ["run", "--until-idle"]):
        p = run(env, *command)
        assert p.returncode == 2
        line = one_line(p)
        assert "peercrawl secret --move" in line and keys.secret in line
    p = run(dict(env, PEERCRAWL_SECRET="another-key-0123456789"), "worker", "--until-idle")
    assert p.returncode == 2 and "peercrawl secret --move" in one_line(p)  # with a secret set too
    p = run(env, "secret", "--move")
    assert p.returncode == 0, p.stderr
    assert p.stdout == LEGACY + "\n"  # printed once, the key alone
    assert "PEERCRAWL_SECRET" in p.stderr
    assert not client.exists(keys.secret)
    p = run(env, "secret", "--move")  # and only once
    assert p.returncode == 0 and p.stdout.startswith("no key stored") and LEGACY not in p.stdout + p.stderr
    rec = Recorder(client, keys, settings.replace(secret=LEGACY), locator)
    assert rec.record_visit(H, ["1.1.1.1", "2.2.2.2", "3.3.3.3"], T0 + 60) == 1  # the old marks still hold
    p = run(dict(env, PEERCRAWL_SECRET=LEGACY), "worker", "--until-idle")
    assert p.returncode == 0, p.stderr[-2000:]


def test_move_refuses_when_peercrawl_secret_is_another_key(client, keys, test_env):
    client.set(keys.secret, LEGACY)
    p = run(dict(test_env, PEERCRAWL_SECRET="another-key-0123456789"), "secret", "--move")
    assert p.returncode == 2 and "differs" in one_line(p) and LEGACY not in p.stdout + p.stderr
    assert client.get(keys.secret) == LEGACY.encode()
    p = run(dict(test_env, PEERCRAWL_SECRET=LEGACY), "secret", "--move")  # already set to it: just deleted
    assert p.returncode == 0 and p.stdout == "" and not client.exists(keys.secret)


def test_the_embedded_default_moves_the_key_into_its_file(tmp_path, embedded_env):  # noqa: F811
    data = tmp_path / "data"
    client = store.connect(Settings(data_dir=data))
    try:
        client.set("{peercrawl}:secret", LEGACY)
    finally:
        embedded.release(data)
    p = run(embedded_env, "worker", "--until-idle", timeout=120)
    assert p.returncode == 2 and "peercrawl secret --move" in one_line(p)
    p = run(embedded_env, "secret", "--move")
    assert p.returncode == 0, p.stderr
    assert LEGACY not in p.stdout + p.stderr and str(key_file(data)) in p.stderr
    assert read_key_file(key_file(data)) == LEGACY.encode()
    assert stat.S_IMODE(key_file(data).stat().st_mode) == 0o600
    p, s = run_json(embedded_env, "secret")
    assert s == {"source": "file", "file": str(key_file(data))}
    assert run(embedded_env, "worker", "--until-idle", timeout=120).returncode == 0
    assert servers(data) == []


def test_a_key_file_that_cannot_be_created_is_one_line(tmp_path, client, keys):
    if os.geteuid() == 0:  # root writes anywhere: use a path under a regular file instead
        (tmp_path / "file").write_text("")
        data = tmp_path / "file" / "data"
    else:
        data = tmp_path / "ro"
        data.mkdir(mode=0o500)
    with pytest.raises(SettingsError, match="cannot (read|create) the fingerprint key file"):
        load_secret(client, keys, Settings(data_dir=data))


def test_the_key_moves_out_of_a_cluster_too(test_env, cluster_ns):  # noqa: F811
    from crawler.cli.secret import _delete_if
    from crawler.keys import Keys

    ns, url = cluster_ns
    client = store.connect(Settings(redis_url=url, secret="x" * 16))
    client.set(Keys(ns).secret, LEGACY)
    env = {k: v for k, v in test_env.items() if k != "PEERCRAWL_SECRET"}
    env.update(REDIS_URL=url, PEERCRAWL_NAMESPACE=ns)
    p = run(env, "secret", "--move")
    assert p.returncode == 0, p.stderr
    assert p.stdout == LEGACY + "\n" and not client.exists(Keys(ns).secret)
    client.set(Keys(ns).secret, "written-since-0123456789")
    _delete_if(client, Keys(ns).secret, LEGACY.encode())  # a key other than the one handed over stays
    assert client.get(Keys(ns).secret) == b"written-since-0123456789"
    client.close()
