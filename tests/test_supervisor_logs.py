"""Several children's log lines through the supervisor: each line whole, however many or long."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# A child that logs N lines as the worker does (crawler.logs, JSON), some longer than a pipe's atomic write.
CHILD = """
import sys
from crawler import logs
logs.configure("info", "json")
log = logs.get("flood")
for i in range(int(sys.argv[1])):
    log.info("line", child=sys.argv[2], i=i, pad="x" * (5000 if i % 100 == 0 else 40))
print("stdout of", sys.argv[2])
"""


# The supervisor as the worker command runs it (gevent-patched), its stderr a pipe, as under a process manager.
SUPERVISOR = """
from gevent import monkey
monkey.patch_all()
import sys
from workers.supervisor import Supervisor
child = sys.argv[1]
raise SystemExit(Supervisor([[sys.executable, "-c", child, "10000", str(c)] for c in (0, 1)], 5.0).run())
"""


def test_two_children_logging_10000_lines_each_give_whole_lines():
    # unbuffered, as process managers and dynos run Python: print() wrote a line and its newline apart
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"}
    p = subprocess.run([sys.executable, "-c", SUPERVISOR, CHILD], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    lines = p.stderr.splitlines()
    seen = set()
    for line in lines:
        event = json.loads(line)  # every line is one whole JSON object
        seen.add((int(event["child"]), event["i"]))
    assert seen == {(c, i) for c in (0, 1) for i in range(10000)} and len(lines) == 20000
    assert sorted(p.stdout.splitlines()) == ["stdout of 0", "stdout of 1"]


def test_a_child_logging_to_a_pipe_nobody_reads_still_runs_to_its_end(tmp_path):
    done = tmp_path / "done"
    script = CHILD + f"\nopen({str(done)!r}, 'w').write('ok')\n"
    r, w = __import__("os").pipe()
    __import__("os").close(r)  # the reader is gone before the child writes a line
    p = subprocess.run([sys.executable, "-c", script, "50", "0"], stderr=w, stdout=subprocess.DEVNULL,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert p.returncode == 0 and done.read_text() == "ok"
