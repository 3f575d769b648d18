"""Settings from the environment: defaults, parsing, one-line errors naming the variable."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from crawler.errors import SettingsError
from crawler.settings import Settings, declarations, markdown_table
from crawler.source_settings import TrackerSpec
from tests.cli import run


def test_defaults():
    s = Settings.from_env({})
    assert s.redis_url is None and s.namespace == "peercrawl" and s.dht and s.revisit_seconds == 1800
    assert all(t.max_peers == 200 for t in s.trackers) and len(s.trackers) >= 1


def test_parsing():
    s = Settings.from_env({
        "REDIS_URL": "redis://h:1/2",
        "PEERCRAWL_TRACKERS": "udp://a:1/announce|50, http://b/announce",
        "PEERCRAWL_DHT": "off",
        "PEERCRAWL_DHT_BOOTSTRAP": "127.0.0.2:6881,[::1]:7000",
        "PEERCRAWL_DHT_LISTEN": "127.0.0.1:0",
        "PEERCRAWL_REVISIT_SECONDS": "60",
        "PEERCRAWL_ALLOW_PRIVATE": "1",
    })
    assert s.trackers == (TrackerSpec("udp://a:1/announce", 50), TrackerSpec("http://b/announce", 200))
    assert s.tracker_max_peers("udp://a:1/announce") == 50 and s.tracker_max_peers("udp://z/a") == 200
    assert s.dht is False and s.dht_bootstrap == (("127.0.0.2", 6881), ("::1", 7000))
    assert s.revisit_seconds == 60 and s.allow_private
    assert Settings.from_env({"PEERCRAWL_TRACKERS": ""}).trackers == ()
    # an IPv6 literal in brackets is a tracker host like any other
    v6 = Settings.from_env({"PEERCRAWL_TRACKERS": "UDP://[2001:db8::1]:6969/announce|80"}).trackers
    assert v6 == (TrackerSpec("udp://[2001:db8::1]:6969/announce", 80),)


def test_the_pool_is_auto_unless_a_size_is_given():
    assert Settings().concurrency == "auto" and Settings.from_env({"PEERCRAWL_CONCURRENCY": " AUTO "}).concurrency == "auto"
    assert Settings.from_env({"PEERCRAWL_CONCURRENCY": "10000"}).concurrency == 10_000
    assert Settings.from_env({"PEERCRAWL_PROCESSES": "Auto"}).processes == "auto"


@pytest.mark.parametrize("spelling", ["0", "0.00", "0e0", "-0", "+0.0", " 0 ", "0E-5"])
@pytest.mark.parametrize("name, field", [
    ("PEERCRAWL_REVISIT_SECONDS", "revisit_seconds"),
    ("PEERCRAWL_TRACKER_FLOOR_SECONDS", "tracker_floor"),
])
def test_nonnegative_settings_take_any_spelling_of_zero(spelling, name, field):
    # contract §8: revisit 0 means due again at once.
    assert getattr(Settings.from_env({name: spelling}), field) == 0.0


@pytest.mark.parametrize("name, value, says", [
    ("REDIS_URL", "localhost:6379", "redis://"),
    ("PEERCRAWL_REVISIT_SECONDS", "soon", "expected a number"),
    ("PEERCRAWL_REVISIT_SECONDS", "-5", "0 or more"),
    ("PEERCRAWL_REVISIT_SECONDS", "nan", "0 or more"),
    ("PEERCRAWL_REVISIT_SECONDS", "inf", "0 or more"),
    ("PEERCRAWL_TRACKER_FLOOR_SECONDS", "-0.5", "0 or more"),
    ("PEERCRAWL_LEASE_SECONDS", "0", "above 0"),
    ("PEERCRAWL_DHT", "maybe", "on or off"),
    ("PEERCRAWL_TRACKERS", "udp://a:1/announce|many", "not a whole number"),
    ("PEERCRAWL_TRACKERS", "ftp://a/announce", "tracker URL"),
    ("PEERCRAWL_TRACKERS", "udp://a:\u0661\u0662/announce", "tracker URL"),
    ("PEERCRAWL_TRACKERS", "udp://a:70000/announce", "out of range"),
    ("PEERCRAWL_DHT_BOOTSTRAP", "x" * 70 + ".example:6881", "host name"),
    ("PEERCRAWL_DHT_BOOTSTRAP", "a\udcffb:6881", "host name"),
    ("PEERCRAWL_TRACKERS", "udp://a\x01b:1/announce", "unprintable"),
    ("PEERCRAWL_TRACKERS", "udp://[1.2.3.4]:1/announce", "brackets"),
    ("PEERCRAWL_DHT_LISTEN", "host:1", "IP address"),
    ("PEERCRAWL_DHT_BOOTSTRAP", "router:99999", "out of range"),
    ("PEERCRAWL_NAMESPACE", "a b", "letters"),
    ("PEERCRAWL_MULTIPLIER_NONE", "2", "between 0 and 1"),
    ("PEERCRAWL_DHT_UPLOAD_RATE_LIMIT", "500000", "from 1024 to 420000"),
    ("STATHAT_URL", "api.stathat.com", "http"),
    ("PEERCRAWL_SECRET", "short", "16 characters"),
    ("PEERCRAWL_CONCURRENCY", "10001", "from 1 to 10000"),
    ("PEERCRAWL_CONCURRENCY", "automatic", "from 1 to 10000"),
    ("PEERCRAWL_PROCESSES", "0", "from 1 to 256"),
])
def test_bad_values_name_the_variable(name, value, says):
    with pytest.raises(SettingsError) as e:
        Settings.from_env({name: value})
    msg = str(e.value)
    assert msg.startswith(name + ":") and says in msg and "\n" not in msg


def test_cli_prints_one_line_and_exits_nonzero(test_env):
    env = dict(test_env, PEERCRAWL_REVISIT_SECONDS="abc")
    p = run(env, "status")
    assert p.returncode == 2
    assert p.stderr.strip() == "peercrawl: PEERCRAWL_REVISIT_SECONDS: expected a number (got 'abc')"


def test_a_crawl_keeps_its_mark_buckets_and_a_command_set_to_another_count_says_so_in_one_line(test_env):
    assert run(dict(test_env, PEERCRAWL_MARK_BUCKETS="4096"), "status").returncode == 0  # a new crawl records it
    assert run(test_env, "status").returncode == 0  # unset: the crawl's own
    p = run(dict(test_env, PEERCRAWL_MARK_BUCKETS="8192"), "status")
    assert p.returncode == 2 and p.stderr.count("\n") == 1
    assert p.stderr.startswith("peercrawl: PEERCRAWL_MARK_BUCKETS is 8192 but namespace ") and "has 4096" in p.stderr


def test_unreachable_redis_is_one_line(test_env):
    env = dict(test_env, REDIS_URL="redis://127.0.0.1:1/0")
    p = run(env, "status")
    assert p.returncode == 2 and p.stderr.count("\n") == 1
    assert "Redis at redis://127.0.0.1:1/0 is not reachable" in p.stderr


def test_a_bad_secret_is_not_shown():
    with pytest.raises(SettingsError) as e:
        Settings.from_env({"PEERCRAWL_SECRET": "hunter2-pw"})
    assert "hunter2" not in str(e.value) and "got 10" in str(e.value)


def test_a_bad_dashboard_token_names_its_own_variable_and_is_not_shown():
    with pytest.raises(SettingsError) as e:
        Settings.from_env({"PEERCRAWL_DASHBOARD_TOKEN": "hunter2-pw"})
    msg = str(e.value)
    assert msg.startswith("PEERCRAWL_DASHBOARD_TOKEN:") and "hunter2" not in msg and "got 10" in msg


# --- each setting declared once ----------------------------------------------

def test_every_field_is_declared_with_one_variable():
    fields = [f.name for f in dataclasses.fields(Settings)]
    decl = declarations()
    assert [name for name, _ in decl] == fields
    envs = [var.env for _, var in decl]
    assert len(set(envs)) == len(envs)
    assert all(var.meaning.strip() for _, var in decl)


def test_unset_environment_gives_the_dataclass_defaults():
    # One default per setting: from_env({}) and Settings() cannot disagree.
    assert Settings.from_env({}) == Settings()
    # ... and a setting derived from another follows it when unset.
    s = Settings.from_env({"PEERCRAWL_TRACKER_MAX_PEERS": "30"})
    assert s.trackers and all(t.max_peers == 30 for t in s.trackers)
    assert Settings.from_env({"PEERCRAWL_TRACKERS": "udp://a:1/x"}).trackers == (TrackerSpec("udp://a:1/x", 200),)


def _numbers_and_switches():
    """The declarations whose default is a number or a switch (text, paths and lists: test_parsing)."""
    return [(n, v) for n, v in declarations() if isinstance(getattr(Settings(), n), (bool, int, float))]


@pytest.mark.parametrize("name, var", _numbers_and_switches(), ids=[n for n, _ in _numbers_and_switches()])
def test_each_number_and_switch_reaches_its_own_field(name, var):
    # Another valid value in the variable changes its field and no other one
    # (but those declared to follow it when unset).
    default = getattr(Settings(), name)
    if isinstance(default, bool):
        raw = "off" if default else "on"
    elif isinstance(default, int):
        raw = str(default + 1)
    else:
        raw = repr(default / 2 if default else 1.0)
    s, base = Settings.from_env({var.env: raw}), Settings.from_env({})
    followers = [n for n, v in declarations() if v.uses == name]
    changed = [f.name for f in dataclasses.fields(Settings) if getattr(s, f.name) != getattr(base, f.name)]
    assert changed == sorted([name, *followers], key=[f.name for f in dataclasses.fields(Settings)].index)


def test_readme_settings_table_is_the_generated_one():
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    start = readme.index("| variable | meaning | default |")
    table = readme[start:readme.index("\n\n", start) + 1]
    assert table == markdown_table(), "README.md's settings table is stale: run " \
        "`python -m crawler.settings --markdown` and paste its output over the table"


def test_the_table_command_prints_it():
    p = subprocess.run([sys.executable, "-m", "crawler.settings", "--markdown"], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 0 and p.stdout == markdown_table() and p.stderr == ""
    assert p.stdout.count("\n") == 2 + len(declarations())


def test_a_stray_peercrawl_variable_is_named_in_one_warning_with_the_closest_setting(test_env):
    env = dict(test_env, PEERCRAWL_CONCURENCY="5", PEERCRAWL_REVISIT_SECOND="3", PEERCRAWL_FROBNICATE="1")
    p = run(env, "status", "--json")
    assert p.returncode == 0, p.stderr
    warnings = [json.loads(x) for x in p.stderr.splitlines() if '"unknown_settings"' in x]
    assert len(warnings) == 1, p.stderr
    assert warnings[0]["message"] == (
        "not a setting, ignored: PEERCRAWL_CONCURENCY (did you mean PEERCRAWL_CONCURRENCY?); "
        "PEERCRAWL_FROBNICATE; PEERCRAWL_REVISIT_SECOND (did you mean PEERCRAWL_REVISIT_SECONDS?)")
    assert "unknown_settings" not in run(test_env, "status", "--json").stderr
