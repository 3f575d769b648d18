"""Group commit's senders: they park when their queue is empty and the next request wakes them."""

from __future__ import annotations

import gc

import gevent
import gevent.event
import pytest

from crawler.store.group_commit import GroupCommit


class Stopped(Exception):
    """What the askers of a killed sender's batch raise."""


def committer(in_flight: int = 1, hold: gevent.event.Event | None = None):
    """A group commit answering each request with itself, noting which greenlet served each batch;
    with ``hold``, each batch waits for it first."""
    served: list = []

    def serve(requests: list) -> list:
        if hold is not None:
            hold.wait()
        served.append((gevent.getcurrent(), list(requests)))
        return requests

    return GroupCommit(serve, cap=100, in_flight=in_flight, stopped=Stopped), served


def senders(commit: GroupCommit) -> list:
    # started through crawler.spawning: its first argument is the function the greenlet runs
    return [o for o in gc.get_objects() if isinstance(o, gevent.Greenlet) and not o.dead
            and o.args[:1] == (commit._send,)]


def test_one_sender_serves_every_request_of_a_lone_asker_and_then_parks():
    commit, served = committer()
    assert [commit.ask(i) for i in range(50)] == list(range(50))
    assert len({g for g, _ in served}) == 1  # the same greenlet, woken 50 times
    assert commit.batches == 50 and not commit.busy
    assert len(senders(commit)) == 1


def test_batches_under_way_at_once_stay_within_in_flight_and_their_senders_serve_the_next_ones():
    hold = gevent.event.Event()
    commit, served = committer(in_flight=2, hold=hold)
    first = [gevent.spawn(commit.ask, i) for i in range(10)]
    gevent.sleep(0.01)
    assert commit.busy
    hold.set()
    gevent.joinall(first, raise_error=True)
    assert sorted(j.value for j in first) == list(range(10))
    again = [gevent.spawn(commit.ask, i) for i in range(10, 20)]
    gevent.joinall(again, raise_error=True)
    assert sorted(j.value for j in again) == list(range(10, 20))
    assert len({g for g, _ in served}) <= 2 and len(senders(commit)) <= 2
    assert not commit.busy


def test_a_sender_killed_while_parked_leaves_and_the_next_request_starts_another():
    commit, served = committer()
    assert commit.ask("a") == "a"
    [parked] = senders(commit)
    parked.kill()
    assert not commit.busy and not senders(commit)
    assert commit.ask("b") == "b"
    assert served[-1][0] is not parked and len(senders(commit)) == 1


def test_a_sender_killed_mid_batch_fails_its_askers_and_the_queue_is_served():
    hold = gevent.event.Event()
    commit, _ = committer(hold=hold)
    caught = gevent.spawn(commit.ask, "held")
    gevent.sleep(0.01)  # its batch waits on hold
    [busy] = senders(commit)
    queued = gevent.spawn(commit.ask, "queued")
    gevent.sleep(0)
    busy.kill()
    hold.set()
    gevent.joinall([caught, queued])
    with pytest.raises(Stopped):
        caught.get()
    assert queued.get() == "queued"  # served by the sender started in its place
    assert not commit.busy


def test_a_batch_of_its_own_is_asked_at_once_each_answer_in_its_place():
    hold = gevent.event.Event()
    commit, served = committer(in_flight=3, hold=hold)
    commit.cap = 4
    mine = gevent.spawn(commit.ask_many, list(range(10)))
    gevent.sleep(0.01)
    # ten requests of cap 4: three batches, one sender each (in_flight allows three)
    assert len(senders(commit)) == 3
    hold.set()
    assert mine.get() == list(range(10))
    assert sorted(len(r) for _, r in served) == [2, 4, 4] and not commit.busy
    assert commit.ask_many([]) == []


def test_a_failed_batch_is_the_answer_of_each_of_its_requests_only():
    def serve(requests: list) -> list:
        if "bad" in requests:
            raise ValueError("bad batch")
        return requests

    commit = GroupCommit(serve, cap=2, in_flight=1, stopped=Stopped)
    answers = commit.ask_many(["a", "b", "bad", "c", "d"])
    # batches of two: [a, b], [bad, c], [d]; the failed batch's requests get its exception
    assert answers[:2] == ["a", "b"] and answers[4] == "d"
    assert all(isinstance(a, ValueError) for a in answers[2:4])
