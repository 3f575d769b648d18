"""Several worker processes on one machine: ``peercrawl worker --processes N|auto``.

A worker is one gevent process: one core. The supervisor fills a dyno the
way gunicorn's ``-w`` or dramatiq's ``--processes`` do: it starts N children,
each a whole ``peercrawl worker`` (its own greenlet pool, ``--concurrency``,
Redis connections, heartbeat and DHT node), and only watches them:

- **Signals.** SIGTERM or SIGINT is passed to every child, which drains as a
  lone worker does (contract §7: within ``PEERCRAWL_SHUTDOWN_SECONDS``); a
  child still running ``KILL_AFTER`` seconds past that is killed (its leases
  come back as any killed worker's do). The supervisor exits 0 when every
  child did, 1 when one had to be killed. Both signals are blocked while a
  child starts (``_start``), so a stop is handled between two starts, never
  half-way through one, and no child starts once the supervisor stops: every
  child started gets the SIGTERM, however early it comes.
- **Logs.** Each child writes its log lines to its own pipe, which the
  supervisor reads line by line and writes to its own stderr (and stdout),
  each line in one write: lines of several children never share a line,
  however long or many (children get the format the supervisor chose, since
  "auto" would choose JSON on a pipe).
- **Its own death.** Each child is bound to the supervisor (``workers.lifeline``:
  it gets SIGTERM when the supervisor dies, even by SIGKILL, and its heartbeat
  stops it if its parent changed), so no child outlives it.
- **Deaths.** A child that exits with an error or is killed is started
  again after a pause that doubles with each death in a row (``BACKOFF``,
  up to ``BACKOFF_MAX``; a child that ran ``HEALTHY_SECONDS`` starts again
  from the first pause), and each death is logged once with how it ended.
  ``DEATHS_LIMIT`` deaths within ``DEATHS_WINDOW`` seconds mean something
  is wrong with every child (a bad setting, Redis gone): the supervisor
  stops the others and exits 1. A child that exits 0 (``--until-idle``,
  ``--max-visits``, ``--duration``) is done and not started again.
- **The whole, not each.** ``--max-visits N`` is shared out (``shares``:
  N // children each, the remainder one more to the first ones), so the
  children claim N together; a child started again after a death gets its
  share again (its claims come back with its leases, so the whole may pass
  N by what the dead child had claimed). ``--duration`` bounds each child
  as it bounds the supervisor: they start together.

``children`` come from ``--processes``: a number, or ``auto`` (one per core
the process may run on: ``workers.cpus``). What the children of one machine
share is split among them (``child_env``): a fixed ``/metrics`` port, or each
fixed port of the DHT's listen addresses (IPv4 and IPv6 alike), becomes one
port per child (``port + i``), and the DHT's per-node rate
is divided by the children, since the nodes that rate protects see one
address whichever child sends.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

from crawler import logs, spawning
from crawler.settings import Settings
from crawler.source_settings import listen_text
from workers.lifeline import STOP_SIGNALS, bind_to

log = logs.get("worker.supervisor")

BACKOFF, BACKOFF_MAX = 1.0, 30.0
HEALTHY_SECONDS = 60.0
DEATHS_LIMIT, DEATHS_WINDOW = 5, 60.0
# Past the children's own shutdown time, how long before a child still running is killed.
KILL_AFTER = 5.0
TICK = 0.2


def shares(total: int | None, children: int) -> list[int | None]:
    """``total`` shared out among ``children`` (None: no bound), the remainder to the first; a child
    with a share of 0 is not started."""
    if total is None:
        return [None] * children
    return [total // children + (i < total % children) for i in range(children)]


def child_env(settings: Settings, i: int, n: int, env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of child ``i`` of ``n``: ``env`` (default this process's) with what the children of
    one machine share split among them (module note)."""
    out = dict(os.environ if env is None else env)
    out["PEERCRAWL_PROCESSES"] = "1"
    out["PEERCRAWL_LOG_FORMAT"] = logs.chosen_format  # their stderr is a pipe the supervisor reads
    out["PEERCRAWL_DHT_NODE_RATE"] = repr(settings.dht_node_rate / n)
    if settings.metrics_port:
        out["PEERCRAWL_METRICS_PORT"] = str(settings.metrics_port + i)
    if any(port for _, port in settings.dht_listen):
        out["PEERCRAWL_DHT_LISTEN"] = listen_text((ip, port + i if port else 0) for ip, port in settings.dht_listen)
    return out


def forward(pipe, out) -> None:
    """Copy ``pipe`` (a child's stdout or stderr, bytes) to ``out`` line by line, each line in one write,
    until the child closes it."""
    binary = getattr(out, "buffer", None)
    with pipe:
        for line in pipe:
            line = line if line.endswith(b"\n") else line + b"\n"
            try:
                if binary is not None:
                    binary.write(line)
                    binary.flush()
                else:  # a text stream without a binary layer (a test's capture)
                    out.write(line.decode("utf-8", "replace"))
                    out.flush()
            except (BrokenPipeError, ConnectionResetError):
                return  # nobody reads the supervisor's output: the child's lines go nowhere


class Supervisor:
    """Starts, watches and stops ``len(argvs)`` children (module note).

    ``argvs[i]``: the command line of child ``i``, ``envs[i]`` its environment
    (default: this process's); ``shutdown``: the children's own drain time (s).
    """

    def __init__(self, argvs: list[list[str]], shutdown: float, envs: list[dict[str, str]] | None = None):
        self.argvs, self.shutdown = argvs, shutdown
        self.envs: Sequence[dict[str, str] | None] = envs or [None] * len(argvs)
        self.children: list[subprocess.Popen | None] = [None] * len(argvs)
        self.started = [0.0] * len(argvs)
        self.pause = [BACKOFF] * len(argvs)
        self.due: dict[int, float] = {}  # child -> when it starts again
        self.done: set[int] = set()
        self.deaths: list[float] = []
        self.stopping_since: float | None = None
        self.killed: set[int] = set()  # children killed at the stop, past their shutdown time

    def run(self) -> int:
        """Until every child is done; 0 when each exited 0, 1 when children kept dying or one was killed.
        Call it from the main thread (its signal handlers, and the children's death signal: lifeline)."""
        previous = {sig: signal.signal(sig, self._stop) for sig in STOP_SIGNALS}
        try:
            return self._run()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _run(self) -> int:
        for i in range(len(self.argvs)):
            self._start(i)
        failed = False
        while len(self.done) < len(self.argvs):
            time.sleep(TICK)
            now = time.monotonic()
            for i, child in enumerate(self.children):
                if i in self.done or child is None or child.poll() is None:
                    continue
                self.children[i] = None
                if child.returncode == 0 or self.stopping_since is not None:
                    self.done.add(i)
                    failed |= child.returncode != 0 and self.stopping_since is None
                    continue
                failed |= self._died(i, child.returncode, now)
            for i, at in list(self.due.items()):
                if at <= now or self.stopping_since is not None:
                    del self.due[i]
                    self._start(i)
            if self.stopping_since is not None and now - self.stopping_since > self.shutdown + KILL_AFTER:
                self._kill(now)
        return 1 if failed or self.killed else 0

    def _start(self, i: int) -> None:
        """Start child ``i``, unless the supervisor stops (then it is done)."""
        if self.stopping_since is not None:
            self.done.add(i)
            return
        # A SIGTERM now waits until the child is in self.children, where _stop finds it.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            child = subprocess.Popen(self.argvs[i], env=self.envs[i], preexec_fn=bind_to(os.getpid()),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            self.children[i] = child
            for pipe, out in ((child.stdout, sys.stdout), (child.stderr, sys.stderr)):
                spawning.spawn(forward, pipe, out)
            self.started[i] = time.monotonic()
            if self.stopping_since is not None:
                # The handler ran all the same: another thread of this process took the signal.
                child.send_signal(signal.SIGTERM)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    def _died(self, i: int, code: int, now: float) -> bool:
        """Child ``i`` ended with ``code``: start it again later; True when children keep dying (all stopped)."""
        how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        if now - self.started[i] >= HEALTHY_SECONDS:
            self.pause[i] = BACKOFF
        self.deaths = [t for t in self.deaths if now - t < DEATHS_WINDOW] + [now]
        if len(self.deaths) >= DEATHS_LIMIT:
            log.error("worker_children_keep_dying", child=i, ended=how, deaths=len(self.deaths),
                      window_s=DEATHS_WINDOW, message="stopping every worker process")
            self.done.add(i)
            self._stop()
            return True
        log.warning("worker_child_died", child=i, ended=how, restart_in_s=self.pause[i])
        self.due[i] = now + self.pause[i]
        self.pause[i] = min(self.pause[i] * 2, BACKOFF_MAX)
        return False

    def _stop(self, *_) -> None:
        """Stop: every child drains (SIGTERM), none starts again."""
        if self.stopping_since is None:
            self.stopping_since = time.monotonic()
        self._signal(signal.SIGTERM)

    def _signal(self, sig: int) -> None:
        for child in self.children:
            if child is not None and child.poll() is None:
                child.send_signal(sig)

    def _kill(self, now: float) -> None:
        """The children still running past the shutdown time and ``KILL_AFTER``: SIGKILL, each logged."""
        assert self.stopping_since is not None  # called only once stopping
        for i, child in enumerate(self.children):
            if child is not None and child.poll() is None and i not in self.killed:
                log.error("worker_child_killed", child=i, pid=child.pid, after_s=round(now - self.stopping_since, 1),
                          message="still running past the shutdown time: its leases expire")
                child.kill()
                self.killed.add(i)
