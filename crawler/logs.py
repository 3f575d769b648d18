"""structlog configuration: JSON lines when stderr is not a terminal.

Logs go to stderr so that ``--json`` output on stdout stays machine-readable.
"""

from __future__ import annotations

import logging
import sys

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure(level: str = "info", fmt: str = "auto", stream=None) -> None:
    """Configure structlog once per process.

    ``fmt``: ``json``, ``console`` or ``auto`` (console on a terminal).
    """
    stream = stream or sys.stderr
    if fmt == "auto":
        fmt = "console" if getattr(stream, "isatty", lambda: False)() else "json"
    processors = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if fmt == "json":
        processors += [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
    else:
        processors += [structlog.dev.ConsoleRenderer(colors=True)]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=False,
    )


def get(name: str | None = None):
    """A bound structlog logger (``name`` goes into the ``component`` field)."""
    # Lazy: a module-level logger made before configure() still follows it.
    return structlog.get_logger(component=name) if name else structlog.get_logger()
