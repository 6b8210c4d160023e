"""Command lines whose output goes to a pipe that closes early: ``python -m annotated.translate <
german.txt | head -1``.

``head`` exits after its first line; the next write of the command then fails with EPIPE. A C
program is ended by the SIGPIPE that comes with it, silently (the shell sees status 141); Python
ignores SIGPIPE and raises ``BrokenPipeError`` instead, which would print a traceback, and again
"Exception ignored ... BrokenPipeError" when the interpreter flushes stdout on exit.
:func:`quiet_on_closed_pipe` makes a command behave like the C programs: no message, status 141.
"""

import os
import sys
from collections.abc import Callable

CLOSED_PIPE_STATUS = 128 + 13  # 128 + SIGPIPE: what a shell reports for a program that SIGPIPE ended


def quiet_on_closed_pipe(body: Callable[[], int]) -> Callable[[], int]:
    """``body`` (a command's work, returning its exit status) with stdout flushed at its end, and a
    closed pipe on stdout ending it quietly with :data:`CLOSED_PIPE_STATUS`."""
    def run() -> int:
        try:
            status = body()
            if sys.stdout is not None:
                sys.stdout.flush()  # a pipe closed early shows here, not at exit, where it cannot be caught
            return status
        except BrokenPipeError:
            silence_stdout()
            return CLOSED_PIPE_STATUS

    return run


def silence_stdout() -> None:
    """Point stdout's file descriptor at the null device, so that the interpreter's last flush of
    what is still buffered for the closed pipe writes nowhere instead of failing again."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # stdout replaced by an object with no descriptor (a test)
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)
