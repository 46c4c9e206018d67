"""The package's log, set up so that a warning reaches a user of the Python API.

Python's advice for libraries (add only a ``NullHandler``) silences every warning until the
application configures logging, and most scripts that call ``tvm_ascend.build`` never do: a
kernel that failed and went to the host, a damaged cache entry rebuilt or a dynamic dimension
guessed would pass unseen. So the package logger gets a handler that prints WARNING and above
to stderr only while the application has configured no logging of its own (the root logger has
no handler), which is what Python's last-resort handler would do without the NullHandler, with
the package named in front. Once the application (or the ``tvm-ascend`` command, through
``logging.basicConfig``) configures logging, records go there alone: nothing is printed twice.

Example
-------
>>> import logging, tvm_ascend
>>> logging.getLogger("tvm_ascend").warning("shown on stderr as 'tvm_ascend: WARNING: ...'")
"""
from __future__ import annotations

import logging
import sys

LOGGER_NAME = "tvm_ascend"


class _UnlessConfigured(logging.Handler):
    """Prints a record to stderr when the root logger has no handler, else drops it (the
    application's handlers get it by propagation)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.setFormatter(logging.Formatter("%(name)s: %(levelname)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if logging.getLogger().handlers:
            return
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:  # noqa: BLE001 - logging must never fail the build
            self.handleError(record)


def install() -> None:
    """Give the package logger its stderr fallback, once per process."""
    logger = logging.getLogger(LOGGER_NAME)
    if not any(isinstance(handler, _UnlessConfigured) for handler in logger.handlers):
        logger.addHandler(_UnlessConfigured())
