"""The errors the course expects, and how its command lines report them.

Every error the package raises on purpose for bad input (a missing or corrupt file, a
checkpoint from another run, data that is not what it should be) derives from
:class:`CourseError`, besides the built-in class it has always been (``ValueError``,
``RuntimeError``), so ``except ValueError`` keeps working. The command lines catch
``CourseError`` and the operating system's file errors and print one or two lines naming the
problem and the fix, with exit code 1; anything else is a bug and keeps its traceback.
"""

import sys
from collections.abc import Callable


class CourseError(Exception):
    """An error whose message names the problem and the fix: shown to the user without a traceback."""


class UsageError(CourseError, ValueError):
    """Options that contradict each other or the checkpoint they act on: exit code 2, like argparse's errors."""


class DataError(CourseError, ValueError):
    """A data file that cannot be read as the course expects (encoding, compression, empty lines)."""


# The operating system's errors a user can act on (a wrong path, a missing permission).
FILE_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError, FileExistsError)


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
    except FILE_ERRORS as error:
        # An OSError raised by the system has strerror and filename; one raised by the course, its message.
        message = f"{error.filename}: {error.strerror}" if error.filename and error.strerror else str(error)
        print(f"{prog}: error: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
