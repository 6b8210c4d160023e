"""``annotated.support.errors``: how the command lines report what a user can act on."""

import errno
import os
import signal
import subprocess
import sys

import pytest

from annotated.support.course import ROOT
from annotated.support.errors import run_command


@pytest.mark.parametrize("code, fix", [
    (errno.ENOSPC, "No space left on device; free space on that disk, or write somewhere else"),
    (errno.EDQUOT, "your disk quota is used up"),
    (errno.EROFS, "that file system is read-only: write somewhere else"),
])
def test_a_full_or_read_only_disk_is_one_line_with_the_fix(code, fix, capsys):
    def body() -> int:
        raise OSError(code, os.strerror(code), "build/site/index.html")

    assert run_command(body, "prog") == 1
    err = capsys.readouterr().err
    assert err.startswith("prog: error: build/site/index.html: ") and err.count("\n") == 1
    assert fix.split(";")[-1].strip() in err


def test_another_os_error_keeps_its_traceback():
    def body() -> int:
        raise OSError(errno.EIO, "Input/output error")

    with pytest.raises(OSError, match="Input/output error"):
        run_command(body, "prog")


def test_a_ctrl_c_while_a_command_starts_is_one_line_not_the_traceback_of_an_import():
    # What `python -m annotated.translate` does: argv[0] is "-m" while the package is imported, then the
    # command's file; a Ctrl-C in the imports after it (torch's) reaches the top as KeyboardInterrupt.
    starting = ("import sys; sys.argv[:1] = ['-m']; import annotated; "
                "sys.argv[0] = '/somewhere/annotated/translate.py'; raise KeyboardInterrupt")
    child = subprocess.run([sys.executable, "-c", starting], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert child.stderr == "python -m annotated.translate: interrupted while starting; nothing was done\n"
    assert child.returncode in (-signal.SIGINT, 130)  # still ends as interrupted, for the shell
    # Imported as a library (a notebook, a test), the package leaves the hook alone; other errors keep
    # their traceback.
    library = subprocess.run([sys.executable, "-c", "import annotated; raise KeyboardInterrupt"], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
    assert "Traceback" in library.stderr
    bug = subprocess.run([sys.executable, "-c", "import sys; sys.argv[:1] = ['-m']; import annotated; 1 / 0"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "Traceback" in bug.stderr and "ZeroDivisionError" in bug.stderr
