"""Commands packed by hiredis at once (crawler/store/command_packer.py): the same bytes, or the same
error, as redis-py's own packer, for any command; and a worker's client packs with it."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st
from redis.connection import HiredisRespSerializer

from crawler.store.command_packer import ArgsPacker
from workers.connections import worker_client

NAME = st.sampled_from(["EVALSHA", "SET", "SCRIPT LOAD", "CLIENT SETNAME", b"GET", b"SCRIPT FLUSH", ""]) | st.text(max_size=8)
ARG = (st.text(max_size=20) | st.binary(max_size=20) | st.integers() | st.floats(allow_nan=True)
       | st.binary(max_size=8).map(bytearray) | st.binary(max_size=8).map(memoryview) | st.booleans() | st.none()
       | st.lists(st.integers(), max_size=2))


def packed(packer, args):
    try:
        return packer.pack(*args)
    except Exception as e:  # noqa: BLE001 - the error is the outcome compared
        return type(e), str(e)


@given(NAME, st.lists(ARG, max_size=300))
def test_the_bytes_or_the_error_are_redis_pys(name, args):
    command = (name, *args)
    assert packed(ArgsPacker(), command) == packed(HiredisRespSerializer(), command)


def test_a_workers_client_packs_with_it_and_redis_reads_its_commands(client, namespace):
    c = worker_client(client, 2)
    key = "{" + namespace + "}:packer"
    try:
        script = c.register_script("return {ARGV[1], ARGV[2], ARGV[3], ARGV[4], redis.call('GET', KEYS[1])}")
        c.set(key, memoryview(b"mv"))  # converted by redis-py's packer
        assert script(keys=[key], args=["text", b"\x00bytes", 12, 1.5]) == [b"text", b"\x00bytes", b"12", b"1.5", b"mv"]
        c.client_setname("packer-test")  # a command name of two words
        assert c.client_getname() == "packer-test" or c.client_getname() == b"packer-test"
        conn = c.connection_pool.get_connection()
        try:
            assert isinstance(conn._command_packer, ArgsPacker)
        finally:
            c.connection_pool.release(conn)
        assert math.isclose(float(c.incrbyfloat(key + ":f", 0.25)), 0.25)
    finally:
        c.delete(key, key + ":f")
