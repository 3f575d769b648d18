"""``peercrawl secret``: where the fingerprint key comes from; ``--move`` takes it out of Redis.

The key must not live in Redis beside the marks it protects (contract §4,
docs/operations.md), but a namespace may hold one at ``{ns}:secret``, generated
there by releases that had no key file. ``--move`` hands that key to the operator and then
deletes it, so the crawl keeps its marks: with ``REDIS_URL`` it prints the
key once on stdout (set ``PEERCRAWL_SECRET`` to it on every worker); on the
embedded default it writes the key file under ``PEERCRAWL_DATA_DIR``. The
delete happens only after the key was handed over, and only if Redis still
holds that same key.
"""

from __future__ import annotations

import json
import sys
from typing import cast

import click
import redis

from crawler.cli.context import open_context
from crawler.counters.fingerprint_key import create_key_file, key_file, read_key_file
from crawler.errors import SettingsError, StoreError
from crawler.store import scripts


@click.command("secret")
@click.option("--move", is_flag=True,
              help="Take a key stored in Redis out of it: print it once (REDIS_URL) or write the key "
                   "file (embedded Redis), then delete it from Redis.")
@click.option("--json", "as_json", is_flag=True, help="Print where the key comes from as JSON (never the key).")
def command(move: bool, as_json: bool) -> None:
    """Show where the key of the IP fingerprints comes from, or move it out of Redis.

    The key never lives in Redis (contract §4): it comes from PEERCRAWL_SECRET,
    or, on the embedded default, from a 0600 file under PEERCRAWL_DATA_DIR.
    """
    ctx = open_context()
    try:
        stored = cast("bytes | None", ctx.client.get(ctx.keys.secret))  # the client decodes no replies
    except redis.RedisError as e:
        raise StoreError(f"cannot read {ctx.keys.secret}: {e}") from e
    if move:
        _move(ctx, stored)
        return
    s = ctx.settings
    if stored is not None:
        source = "redis"
    elif s.secret is not None:
        source = "PEERCRAWL_SECRET"
    elif s.redis_url:
        source = None
    else:
        source = "file"
    path = None if s.redis_url else str(key_file(s.data_dir))
    if as_json:
        click.echo(json.dumps({"source": source, "file": path}))
        return
    if source == "redis":
        click.echo(f"the key is stored in Redis ({ctx.keys.secret}): run `peercrawl secret --move`")
    elif source == "PEERCRAWL_SECRET":
        click.echo("the key comes from PEERCRAWL_SECRET")
    elif source is None:
        click.echo("no key: set PEERCRAWL_SECRET (required with REDIS_URL)")
    else:
        click.echo(f"the key is in {path} (generated on first use, owner-only)")


def _move(ctx, stored: bytes | None) -> None:
    s, name = ctx.settings, ctx.keys.secret
    if stored is None:
        click.echo(f"no key stored in Redis ({name}); nothing to move")
        return
    if s.secret is not None and s.secret.encode() != stored:
        raise SettingsError(
            f"PEERCRAWL_SECRET differs from the key stored in Redis ({name}), which made this crawl's "
            "marks; unset PEERCRAWL_SECRET and run `peercrawl secret --move` again to keep them")
    if s.secret is not None:
        click.echo("PEERCRAWL_SECRET already holds the stored key; deleting it from Redis", err=True)
    elif s.redis_url:
        sys.stdout.write(stored.decode() + "\n")
        sys.stdout.flush()
        click.echo("set PEERCRAWL_SECRET to the key above on every machine that runs peercrawl; "
                   "it is now deleted from Redis and shown nowhere else", err=True)
    else:
        path = key_file(s.data_dir)
        have = read_key_file(path)
        if have is None and not create_key_file(path, stored.decode()):
            have = read_key_file(path)
        if have is not None and have != stored:
            raise SettingsError(
                f"PEERCRAWL_DATA_DIR: {path} holds another key than the one stored in Redis ({name}); "
                "move that file away to keep this crawl's marks")
        click.echo(f"moved the key to {path} (owner-only)", err=True)
    try:
        _delete_if(ctx.client, name, stored)
    except redis.RedisError as e:
        raise StoreError(f"the key was handed over but deleting {name} failed: {e}; run the command "
                         "again") from e


def _delete_if(client: redis.Redis, name: str, value: bytes) -> None:
    """Delete ``name`` only if it still holds ``value`` (the key handed over); one script, so a key
    written meanwhile is left for the next ``--move``."""
    scripts.register(client, "delete_if", "crawler.counters")(keys=[name], args=[value])
