"""``annotated.support.errors``: how the command lines report what a user can act on."""

import errno
import os
import signal
import subprocess
import sys
import time

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
    # As in a terminal: the child gets SIGINT's default handling (a background job would ignore it).
    child = subprocess.Popen([sys.executable, "-m", "annotated.translate", "--help"], cwd=ROOT, text=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(0.5)  # torch is still loading
    child.send_signal(signal.SIGINT)
    err = child.communicate(timeout=120)[1]
    if child.returncode == 0:
        pytest.skip("the command finished before the Ctrl-C (a fast machine)")
    assert err == "python -m annotated.translate: interrupted while starting; nothing was done\n"
    assert child.returncode == -signal.SIGINT  # still ends as interrupted, for the shell (130)
