"""The grader's sandbox itself (annotated/support/sandbox.py), without a kernel: a Python run by
the command line a kernel gets sees what the README says and no more. Skipped where bubblewrap
is missing, unless ANNOTATED_REQUIRE_BWRAP=1 (CI)."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from annotated.support import sandbox
from annotated.support.course import ROOT
from tests.test_grade import needs_bwrap as needs_bubblewrap

BWRAP = sandbox.bubblewrap()


@pytest.fixture(autouse=True)
def needs_bwrap():
    needs_bubblewrap()  # skipped without bubblewrap, unless ANNOTATED_REQUIRE_BWRAP=1


def inside(tmp_path, code: str, hidden=(), memory=2**30, cpu=60) -> dict:
    """Run ``code`` (which prints one JSON object) in the sandbox a kernel would get."""
    work, runtime = tmp_path / "work", tmp_path / "run"
    work.mkdir(exist_ok=True)
    runtime.mkdir(exist_ok=True)
    command = sandbox.command(BWRAP.path, work, runtime, hidden, cpu, memory)
    done = subprocess.run([*command, sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, cwd=work)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_sandboxed_python_sees_its_folder_the_package_and_nothing_else(tmp_path):
    other = tmp_path / "submissions" / "zoe"
    other.mkdir(parents=True)
    (other / "01.ipynb").write_text("zoe's")
    (tmp_path / "home-secret").write_text("secret")
    found = inside(tmp_path, f"""
        import json, os, pathlib, resource, socket
        import annotated, torch
        package = pathlib.Path(annotated.__file__).parent
        def can_write(path):
            try:
                pathlib.Path(path).write_text("x")
                return True
            except OSError:
                return False
        def connects():
            try:
                socket.create_connection(("1.1.1.1", 80), timeout=3)
                return True
            except OSError:
                return False
        print(json.dumps({{
            "cwd": os.getcwd(), "own": can_write("mine.txt"), "package": can_write(package / "x.py"),
            "solutions": (package.parent / "solutions").exists(), "zoe": os.path.exists({str(other)!r}),
            "secret": os.path.exists({str(tmp_path / "home-secret")!r}), "tmp": os.listdir("/tmp"),
            "network": connects(), "pid": os.getpid(), "home": os.environ["HOME"],
            "env": sorted(os.environ), "data": resource.getrlimit(resource.RLIMIT_DATA)[0],
            "cpu": resource.getrlimit(resource.RLIMIT_CPU)[0]}}))
    """, hidden=[tmp_path / "submissions", ROOT / "solutions"])
    assert found["cwd"] == str(tmp_path / "work") and found["own"] and (tmp_path / "work" / "mine.txt").exists()
    assert not found["package"] and not found["solutions"] and not found["zoe"] and not found["secret"]
    # A /tmp of its own: its home, and the way to its own folder, to the interpreter's and to the
    # package's where they are under /tmp (a virtual environment made by mktemp, as CI's).
    bound = [tmp_path, sandbox.PACKAGE, *sandbox.readable_roots()]
    way = {p.resolve().relative_to("/tmp").parts[0] for p in bound if str(p.resolve()).startswith("/tmp/")}
    assert sorted(found["tmp"]) == sorted({"home", *way}) and found["home"] == "/tmp/home"
    assert not found["network"] and found["pid"] < 10  # no network, a process namespace of its own
    assert found["data"] == 2**30 and found["cpu"] == 60
    assert not {"JPY_SESSION_NAME", "SSH_AUTH_SOCK", "AWS_SECRET_ACCESS_KEY"} & set(found["env"])


def test_the_memory_limit_stops_an_allocation_not_the_grader(tmp_path):
    found = inside(tmp_path, """
        import json
        try:
            block = bytearray(3 * 2**30)
            print(json.dumps({"allocated": True}))
        except MemoryError:
            print(json.dumps({"allocated": False}))
    """, memory=2**30)
    assert found == {"allocated": False}


@pytest.fixture
def outside_tmp():
    """A folder outside /tmp (the grader's temporary folders, never bound), removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="annotated-test-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_hidden_folder_inside_a_bound_one_is_covered(tmp_path, monkeypatch, outside_tmp):
    """A submissions folder inside a folder the kernel must read (here, one on sys.path) is
    covered by an empty one."""
    shared = outside_tmp / "shared"
    (shared / "submissions").mkdir(parents=True)
    (shared / "submissions" / "zoe.ipynb").write_text("zoe's")
    (shared / "helper.py").write_text("VALUE = 7\n")
    monkeypatch.setattr(sys, "path", [*sys.path, str(shared)])
    found = inside(tmp_path, f"""
        import json, os, sys
        sys.path.append({str(shared)!r})
        import helper
        print(json.dumps({{"helper": helper.VALUE, "listed": os.listdir({str(shared / "submissions")!r})}}))
    """, hidden=[shared / "submissions"])
    assert found == {"helper": 7, "listed": []}


def test_the_number_of_processes_is_limited(monkeypatch):
    """A fork bomb stops at the limit: RLIMIT_NPROC set to the user's count plus TASKS (here the count
    taken as 0 and TASKS 40). Linux does not apply the limit to root, so a root run (CI) tries it as
    the user nobody, with the system's Python (the sandbox binds it read-only like every other)."""
    python = "/usr/bin/python3"
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.getuid() == 0 else []
    if not os.path.exists(python) or as_nobody and not shutil.which("setpriv"):
        pytest.skip("needs /usr/bin/python3, and setpriv when run as root")
    monkeypatch.setattr(sandbox, "TASKS", 40)
    monkeypatch.setattr(sandbox, "tasks_of_user", lambda uid=None: 0)
    # Only the system's folders: the user nobody may not reach the grader's Python or the checkout.
    monkeypatch.setattr(sandbox, "readable_roots", lambda hidden=(): [Path(p) for p in sandbox.SYSTEM
                                                                      if os.path.lexists(p)])
    monkeypatch.setattr(sandbox, "PACKAGE", Path("/usr"))
    folder = Path(tempfile.mkdtemp(prefix="annotated-nproc-"))
    try:
        work, runtime = folder / "work", folder / "run"
        for path in (folder, work, runtime):
            path.mkdir(exist_ok=True)
            path.chmod(0o777)
        command = sandbox.command(BWRAP.path, work, runtime, (), 60, 2**30)
        assert command[command.index(str(sandbox.FILE_BYTES)) + 1] == "40"
        bomb = ("import os, time\n"
                "for i in range(200):\n"
                "    try:\n"
                "        if os.fork() == 0:\n"
                "            time.sleep(2)\n"
                "            os._exit(0)\n"
                "    except OSError:\n"
                "        print(i)\n"
                "        break\n"
                "else:\n"
                "    print(200)\n")
        done = subprocess.run([*as_nobody, python, *command[1:], python, "-c", bomb], capture_output=True,
                              text=True, timeout=60, cwd=work)
        assert done.returncode == 0, done.stderr
        assert 20 <= int(done.stdout.split()[-1]) < 40  # the processes it started before the limit
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_the_users_count_counts_threads():
    import threading
    stop = threading.Event()
    before = sandbox.tasks_of_user()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert sandbox.tasks_of_user() >= before + 1
    finally:
        stop.set()
        thread.join()
