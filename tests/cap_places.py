"""Where an announce cap placed each request, read exactly in Redis's clock.

The cap answers each request with a wait counted from the moment its script
ran, a time the caller never sees. A send time taken as "the reply's arrival
plus the wait" carries the caller's latency, which a loaded machine stretches
by milliseconds: enough to make two places look closer than the cap spaced
them. ``Places`` runs each call of a cap's script unchanged, in one MULTI
with a read of the schedule the call leaves behind, and from that reads the
moment the script ran and each request's place (µs), exactly:

- the namespace's schedule gives the call's requests consecutive places, so
  it ends ``n - k`` intervals after the place of its ``k``-th request; a
  request to a tracker without a rate of its own goes at its place;
- a tracker's own schedule ends one of its intervals after the last request
  the call sent it.

Each such reading gives the moment the call ran; they must agree.
"""

from __future__ import annotations

from dataclasses import dataclass

from crawler.sources.rate_budget import RateBudget


@dataclass(frozen=True)
class Placed:
    """One request the cap granted."""

    at: int  # when the request may go: µs of Redis's clock
    wait: int  # µs the asker was told to wait
    url: str | None  # its tracker, when that has a rate of its own; None: the namespace's cap alone


def gaps(times: list[int]) -> list[int]:
    """The gaps between consecutive ``times`` once sorted."""
    times = sorted(times)
    return [b - a for a, b in zip(times, times[1:])]


class Places:
    """Every request ``cap`` granted from now on, with its exact place (``requests``, in the order granted)."""

    def __init__(self, cap: RateBudget):
        self.requests: list[Placed] = []
        script = cap._script
        client = script.registered_client

        def run(keys, args):
            with client.pipeline(transaction=True) as p:
                script(keys=keys, args=args, client=p)
                p.hgetall(keys[0])
                reply, schedule = p.execute()
            self._read(args, reply, {k.decode(): int(v) for k, v in schedule.items()})
            return reply

        cap._script = run

    def _read(self, args: list, reply: list[list[int]], schedule: dict[str, int]) -> None:
        every, n_capped = int(args[0]), int(args[1])
        urls = [args[2 + 2 * i] for i in range(n_capped)]
        own = [int(args[3 + 2 * i]) for i in range(n_capped)]
        a = 2 + 2 * n_capped
        refs: list[int] = []  # each request's tracker number (0: no rate of its own), in call order
        for _ in range(int(args[a])):
            m = int(args[a + 1])
            refs += [int(r) for r in args[a + 2:a + 2 + m]]
            a += 1 + m
        waits = [int(w) for visit in reply for w in visit]
        assert len(waits) == len(refs), (args, reply)
        ran = set()
        if every and "*" in schedule:
            ran |= {schedule["*"] - (len(refs) - k) * every - w for k, (r, w) in enumerate(zip(refs, waits)) if r == 0}
        for r in set(refs) - {0}:
            assert urls[r - 1] in schedule, f"no schedule kept for {urls[r - 1]}"
            last = max(k for k, x in enumerate(refs) if x == r)
            ran.add(schedule[urls[r - 1]] - own[r - 1] - waits[last])
        assert ran, "no schedule to read the call's moment from: the cap keeps none"
        # a cap whose schedules are not one place per interval: readings apart by a part of one
        assert len(ran) == 1, f"the schedules' readings of when the call ran disagree by {max(ran) - min(ran)} µs"
        (now,) = ran
        self.requests += [Placed(now + w, w, urls[r - 1] if r else None) for r, w in zip(refs, waits)]
