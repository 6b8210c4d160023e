"""The errors the course expects, and how its command lines report them.

Every error the package raises on purpose for bad input (a missing or corrupt file, a
checkpoint from another run, data that is not what it should be) derives from
:class:`CourseError`, besides the built-in class it has always been (``ValueError``,
``RuntimeError``), so ``except ValueError`` keeps working. The command lines catch
``CourseError`` and the operating system's file errors (a wrong path, a permission, a full or
read-only disk) and print one or two lines naming the problem and the fix, with exit code 1;
anything else is a bug and keeps its traceback. A Ctrl-C is one line and exit code 130, also
while a command is still starting (:func:`quiet_interrupt_while_starting`).
"""

import errno
import sys
from collections.abc import Callable
from pathlib import Path


class CourseError(Exception):
    """An error whose message names the problem and the fix: shown to the user without a traceback."""


class UsageError(CourseError, ValueError):
    """Options that contradict each other or the checkpoint they act on: exit code 2, like argparse's errors."""


class DataError(CourseError, ValueError):
    """A data file that cannot be read as the course expects (encoding, compression, empty lines)."""


# The operating system's errors a user can act on (a wrong path, a missing permission).
FILE_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError, FileExistsError)
# Other OSErrors a user can act on, by errno, with what to do.
DISK_ERRORS = {
    errno.ENOSPC: "free space on that disk, or write somewhere else",
    errno.EDQUOT: "your disk quota is used up: free space in it, or write somewhere else",
    errno.EROFS: "that file system is read-only: write somewhere else",
    errno.EFBIG: "the file is larger than that file system allows: write somewhere else",
}


def os_error_message(error: OSError) -> str:
    """One line for an OSError: the file, the system's words, and for a full or read-only disk the fix."""
    message = f"{error.filename}: {error.strerror}" if error.filename and error.strerror else str(error)
    fix = DISK_ERRORS.get(error.errno)
    return f"{message}; {fix}" if fix else message


def run_command(body: Callable[[], int], prog: str) -> int:
    """Run a command line's ``body``; expected errors become ``prog: error: ...`` and exit code 1
    (2 for a :class:`UsageError`, as argparse exits on bad options).

    KeyboardInterrupt (Ctrl-C) exits with 130, the shell's code for it, without a traceback.
    """
    try:
        return body()
    except CourseError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2 if isinstance(error, UsageError) else 1
    except OSError as error:
        # An OSError raised by the system has strerror and filename; one raised by the course, its message.
        if not isinstance(error, FILE_ERRORS) and error.errno not in DISK_ERRORS:
            raise  # not one a user can act on: a bug, or a fault of the machine, with its traceback
        print(f"{prog}: error: {os_error_message(error)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


def command_name(argv0: str) -> str:
    """``python -m annotated.translate`` for the file ``.../annotated/translate.py`` that runs."""
    path = Path(argv0)
    parts = path.with_suffix("").parts
    if "annotated" in parts:
        return "python -m " + ".".join(parts[len(parts) - 1 - parts[::-1].index("annotated"):])
    return path.name or "python"


def quiet_interrupt_while_starting() -> None:
    """For ``python -m annotated.<command>``, called as the package is imported: a Ctrl-C before
    the command's :func:`run_command` takes over (while torch or spaCy load) prints one line, not the
    traceback of whatever import it stopped, and the process still ends as interrupted (status 130).
    Other uncaught errors keep their traceback."""
    def hook(kind, value, traceback) -> None:
        if issubclass(kind, KeyboardInterrupt):
            print(f"{command_name(sys.argv[0])}: interrupted while starting; nothing was done", file=sys.stderr)
            return
        sys.__excepthook__(kind, value, traceback)

    sys.excepthook = hook
