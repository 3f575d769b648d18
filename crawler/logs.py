"""structlog configuration: JSON lines when stderr is not a terminal, else console lines.

Logs go to stderr so that ``--json`` output on stdout stays machine-readable.

A log line, and a traceback in it, never holds a secret or a peer's
address: tracebacks are Python's plain ones, without
the frames' local variables (where keys, tokens, passwords and peer
addresses live), in every format; and every text of ``hidden`` (the
fingerprint key, the dashboard token, the Redis password: ``hide``) is
replaced by ``<hidden>`` in each event's values and in the rendered line,
and in the traceback of an exception no one caught (``sys.excepthook``).
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from collections.abc import Iterable, Iterator
from contextlib import contextmanager


@contextmanager
def _rich_hidden() -> Iterator[None]:
    """While it holds, ``import rich`` fails as if rich were not installed, unless rich is imported
    already. structlog imports rich when it can, for tracebacks with local variables that this
    module never renders (its console lines take ``plain_traceback``), and that import is a sixth
    of a worker's start-up; rich stays importable afterwards for the commands that draw with it.
    structlog treats a failed import as rich's absence (were it to need rich, it is imported again
    with rich)."""
    if "rich" in sys.modules:
        yield
        return
    sys.modules["rich"] = None  # type: ignore[assignment]  # Python's mark of a module that fails to import
    try:
        yield
    finally:
        del sys.modules["rich"]


try:
    with _rich_hidden():
        import structlog
except ImportError:  # a structlog that needs rich after all
    import structlog
from structlog.typing import EventDict, Processor  # noqa: E402 (structlog first, above)

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
FORMATS = ("json", "console")
HIDDEN = "<hidden>"
# A text shorter than this is never searched for: it would replace ordinary
# words and digits of every line (a secret that short is no secret anyway).
HIDDEN_MIN_CHARS = 4

_hidden: set[str] = set()
# The format configure() chose ("json" or "console"): a supervisor hands it to the children whose
# stderr it reads through a pipe, where "auto" would choose JSON on a terminal.
chosen_format = "json"


def configure(level: str = "info", fmt: str = "auto", stream=None, hidden: Iterable[str | None] = ()) -> None:
    """Configure structlog for this process (a later call replaces the earlier set-up).

    ``fmt``: ``json``, ``console`` or ``auto`` (console on a terminal).
    ``hidden``: texts never written (see ``hide``). Raises ``KeyError`` for
    an unknown ``level``, ``ValueError`` for an unknown ``fmt``.
    """
    stream = stream or sys.stderr
    if fmt == "auto":
        fmt = "console" if getattr(stream, "isatty", lambda: False)() else "json"
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r}: expected one of auto, {', '.join(FORMATS)}")
    global chosen_format
    chosen_format = fmt
    _hidden.clear()
    hide(*hidden)
    processors: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        # The traceback as text before anything renders it: Python's own
        # format, which shows no local variables, and text that _scrub can clean.
        structlog.processors.format_exc_info,
        _scrub_event,
    ]
    renderer: Processor
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
    else:
        # The traceback arrives as the ``exception`` text; were an exc_info to
        # reach it, the plain formatter still shows no locals (rich's default does).
        renderer = structlog.dev.ConsoleRenderer(colors=True, exception_formatter=structlog.dev.plain_traceback)
    structlog.configure(
        processors=[*processors, _Scrubbed(renderer)],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        # one write per line, newline included (print's two writes let another process's line in
        # between), to a stream that goes quiet once its reader is gone (a drain still runs)
        # (structlog types the stream as a TextIO; its WriteLogger calls write and flush alone)
        logger_factory=structlog.WriteLoggerFactory(_Quiet(stream)),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )
    sys.excepthook = _excepthook


class _Quiet:
    """``stream`` for log lines, quiet for good once its reader is gone: a worker whose supervisor died
    with the pipe it logged to still drains and hands its torrents back."""

    def __init__(self, stream):
        self.stream, self.gone = stream, False

    def write(self, text: str) -> None:
        if self.gone:
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.gone = True

    def flush(self) -> None:
        pass  # write() flushes each line


def _excepthook(kind, value, tb) -> None:
    """An exception no one caught, as Python prints it (no locals), with the hidden texts taken out."""
    sys.stderr.write(scrub("".join(traceback.format_exception(kind, value, tb))))


def hide(*texts: str | None) -> None:
    """Never write any of ``texts`` in a log line of this process (each becomes ``<hidden>``).

    Texts shorter than ``HIDDEN_MIN_CHARS`` and None are skipped.
    """
    for t in texts:
        if t and len(t) >= HIDDEN_MIN_CHARS:
            _hidden.add(t)
            # as it reads inside a JSON string or a repr (quotes and backslashes escaped)
            _hidden.add(json.dumps(t)[1:-1])
            _hidden.add(repr(t)[1:-1])


def scrub(text: str) -> str:
    """``text`` with every hidden text replaced by ``<hidden>`` (longest first)."""
    for t in sorted(_hidden, key=len, reverse=True):
        if t in text:
            text = text.replace(t, HIDDEN)
    return text


def _scrubbed(value):
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {k: _scrubbed(v) for k, v in value.items()}
    if type(value) in (list, tuple, set, frozenset):  # a subclass's repr is scrubbed once rendered
        return type(value)(_scrubbed(v) for v in value)
    return value


def _scrub_event(_logger, _name, event_dict: EventDict) -> EventDict:
    """The processor taking hidden texts out of every string value of the event."""
    return {k: _scrubbed(v) for k, v in event_dict.items()} if _hidden else event_dict


class _Scrubbed:
    """A renderer whose output is scrubbed too (a value's repr may show a hidden text)."""

    def __init__(self, renderer):
        self.renderer = renderer

    def __call__(self, logger, name: str, event_dict: EventDict) -> str:
        return scrub(self.renderer(logger, name, event_dict))


def get(name: str | None = None):
    """A bound structlog logger (``name`` goes into the ``component`` field)."""
    # Lazy: a module-level logger made before configure() still follows it.
    return structlog.get_logger(component=name) if name else structlog.get_logger()
