"""The sandbox each submission's kernel runs in when the grader grades it: bubblewrap (``bwrap``).

    python -m annotated.support.sandbox        # says whether bubblewrap is there and works

bubblewrap (Debian's and Ubuntu's package ``bubblewrap``, ``sudo apt-get install bubblewrap``)
starts a process in new Linux namespaces, with only the folders it is given. The kernel of a
submission sees:

- the system's programs and libraries (``/usr``, ``/bin``, ``/lib``, ``/etc``), the Python that
  runs the grader and its installed packages, read-only;
- the course's package ``annotated`` read-only, and not the folder around it: ``solutions/``,
  ``exercises/`` and the rest of the checkout are absent;
- its own copy of the submission, in a folder of its own, writable (its only writable files
  that outlive it, deleted after grading); the kernel's connection files beside it;
- a private ``/tmp`` (in memory, at most ``TMP_BYTES``) and ``$HOME`` inside it;
- no network (a network namespace of its own, with no interface but its own loopback), no
  other process (a process namespace of its own), no GPU;
- limits: CPU time (``RLIMIT_CPU``), memory (``RLIMIT_DATA``: the heap and every private
  writable mapping), the size of any file it writes (``RLIMIT_FSIZE``) and the number of
  processes and threads (``RLIMIT_NPROC``: the user's count when the kernel starts, plus
  ``TASKS``; Linux counts every process of the user, and does not apply it to root).

Every other file of the machine is absent: the other submissions, the grader's other temporary
folders, the gradebooks, the user's home folder. Folders named in ``hidden`` are covered by an
empty one where a bound folder holds them (a submission folder inside the checkout, say).

Where bubblewrap is missing, or cannot create namespaces (a container that forbids them), the
grader says so at the top of its report and in its gradebooks, and runs each kernel as the
user, as before (README, "Grading").
"""

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import annotated

PACKAGE = Path(annotated.__file__).resolve().parent
# The system's folders a Python needs (those that exist are bound, read-only).
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
# The environment variables a kernel keeps; every other one is dropped (tokens, credentials).
KEPT_ENV = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "PYTHONPATH", "PYTHONHASHSEED",
            "PYTHONDONTWRITEBYTECODE", "PYTHONWARNINGS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
            "OPENBLAS_NUM_THREADS", "MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY", "MPLBACKEND")
TMP_BYTES = 512 * 2**20     # the private /tmp, in memory
FILE_BYTES = 2 * 2**30      # the largest file a kernel may write
TASKS = 512                 # processes and threads a kernel may add to the user's
REQUIRE = "ANNOTATED_REQUIRE_BWRAP"  # "1": a missing bubblewrap is an error (CI), not a warning

# Sets the limits, then becomes bubblewrap: run by the interpreter with -I -S (no site, no
# environment), so that nothing of the user's or the submission's runs before it.
_LIMITS = (
    "import os, resource, sys\n"
    "cpu, data, size, tasks = (int(v) for v in sys.argv[1:5])\n"
    "resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))\n"
    "resource.setrlimit(resource.RLIMIT_DATA, (data, data))\n"
    "resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))\n"
    "resource.setrlimit(resource.RLIMIT_NPROC, (tasks, tasks))\n"
    "os.execv(sys.argv[5], sys.argv[5:])\n"
)


def tasks_of_user(uid: int | None = None) -> int:
    """How many processes and threads the user runs now (what ``RLIMIT_NPROC`` counts)."""
    uid = os.getuid() if uid is None else uid
    count = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}").st_uid == uid:
                count += len(os.listdir(f"/proc/{pid}/task"))
        except OSError:  # a process that ended meanwhile
            continue
    return count


@dataclass(frozen=True)
class Bubblewrap:
    """Whether submissions run in bubblewrap: its path, or why not."""

    path: str | None
    why_not: str = ""

    @property
    def present(self) -> bool:
        return self.path is not None

    def describe(self) -> str:
        """One line for the top of a report."""
        if self.present:
            return ("sandbox: bubblewrap (each kernel sees its own copy only, the package read-only, "
                    "no network, no other submission)")
        return (f"NO SANDBOX: {self.why_not}. Each notebook runs as you, with your files and network: "
                "a submission can read and change what you can (README, \"Grading\"). Install "
                "bubblewrap: sudo apt-get install bubblewrap")


@functools.cache
def bubblewrap() -> Bubblewrap:
    """bubblewrap on this machine, tried once: ``bwrap`` on the PATH that can start a process in
    new namespaces."""
    if not sys.platform.startswith("linux"):
        return Bubblewrap(None, f"bubblewrap runs on Linux only, not on {sys.platform}")
    path = shutil.which("bwrap")
    if path is None:
        return Bubblewrap(None, "bubblewrap (bwrap) is not installed")
    try:
        tried = subprocess.run([path, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"],
                               capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return Bubblewrap(None, f"bubblewrap ({path}) does not start: {err}")
    if tried.returncode != 0:
        why = (tried.stderr.strip().splitlines() or ["no message"])[-1]
        return Bubblewrap(None, f"bubblewrap ({path}) cannot create namespaces here ({why})")
    return Bubblewrap(path)


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def readable_roots(hidden: Iterable[Path] = ()) -> list[Path]:
    """The folders a kernel reads, bound read-only at their own paths: the system's, the
    interpreter's and those of ``sys.path`` (the package is bound on its own, last). A folder of
    ``sys.path`` that holds the package and a hidden folder (the checkout, when the grader runs
    from it) is left out; one inside a hidden folder too."""
    hidden = [Path(h).resolve() for h in hidden]
    candidates = [Path(p) for p in SYSTEM]
    for path in (sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path):
        if path and os.path.isabs(path) and os.path.exists(path):
            path = Path(path).resolve()
            candidates.append(path.parent if path.is_file() else path)  # a zip of the standard library
    roots: list[Path] = []
    for root in candidates:
        if not os.path.lexists(root) or root == Path("/"):
            continue
        if any(_inside(root, h) for h in hidden):
            continue
        if _inside(PACKAGE, root) and any(_inside(h, root) for h in hidden):
            continue
        roots.append(root)
    unique: list[Path] = []
    for root in sorted(set(roots), key=lambda p: (len(p.parts), str(p))):
        if root.is_symlink() or not any(_inside(root, kept) for kept in unique if not kept.is_symlink()):
            unique.append(root)
    return unique


def command(bwrap: str, work: Path, runtime: Path, hidden: Iterable[Path] = (), cpu_seconds: int = 3600,
            memory_bytes: int = 4 * 2**30) -> list[str]:
    """The command line that runs a kernel in bubblewrap: the limits, then ``bwrap`` with its
    folders, ending where the kernel's own command line goes. ``work`` (the submission's copy)
    and ``runtime`` (the kernel's connection file and sockets) are bound writable at their own
    paths; ``hidden`` folders and files are covered where a bound folder holds them."""
    # The grader's temporary folders (the other submissions' copies) are never bound: no root may
    # hold the temporary folder. A root inside it (a virtual environment made by mktemp, as CI's) is
    # bound like any other, below the private /tmp.
    private = [Path(p).resolve() for p in (tempfile.gettempdir(), "/tmp")]
    hidden = [Path(h).resolve() for h in hidden]
    roots = [root for root in readable_roots(hidden) if not any(_inside(tmp, root) for tmp in private)]
    hidden += private
    args = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv",
            # first the private /tmp, so that a folder bound below it afterwards shows
            "--dev", "/dev", "--proc", "/proc", "--size", str(TMP_BYTES), "--tmpfs", "/tmp", "--dir", "/tmp/home"]
    for root in roots:
        if root.is_symlink():  # /bin -> usr/bin on a merged /usr
            args += ["--symlink", os.readlink(root), str(root)]
        else:
            args += ["--ro-bind", str(root), str(root)]
    for path in hidden:  # a hidden folder inside a bound one: an empty folder over it
        if path.exists() and any(_inside(path, root) and path != root for root in roots):
            args += ["--tmpfs", str(path)] if path.is_dir() else ["--ro-bind", "/dev/null", str(path)]
    if not any(_inside(PACKAGE, root) for root in roots):
        args += ["--ro-bind", str(PACKAGE), str(PACKAGE)]
    args += ["--bind", str(work), str(work), "--bind", str(runtime), str(runtime), "--chdir", str(work)]
    env = {name: os.environ[name] for name in KEPT_ENV if name in os.environ}
    # JPY_PARENT_PID=1: ipykernel then neither polls for a parent it cannot see (its own process
    # namespace) nor prints its connection details (--die-with-parent ends it with the grader).
    env |= {"HOME": "/tmp/home", "TMPDIR": "/tmp", "PYDEVD_DISABLE_FILE_VALIDATION": "1", "JPY_PARENT_PID": "1"}
    for name, value in env.items():
        args += ["--setenv", name, value]
    return [sys.executable, "-I", "-S", "-c", _LIMITS, str(cpu_seconds), str(memory_bytes), str(FILE_BYTES),
            str(tasks_of_user() + TASKS), *args, "--"]


def kernel_manager(prefix: list[str], runtime: Path):
    """A jupyter kernel manager whose kernel runs under ``prefix`` (the command of
    :func:`command`), over Unix sockets in ``runtime`` (a network namespace of its own has no
    route to the grader's TCP ports), interrupted by a message (a signal would reach bubblewrap,
    not the kernel)."""
    from jupyter_client.manager import AsyncKernelManager

    class SandboxedKernelManager(AsyncKernelManager):
        @property
        def kernel_spec(self):
            spec = super().kernel_spec
            if spec is not None:
                spec.interrupt_mode = "message"
            return spec

        def format_kernel_cmd(self, extra_arguments=None):
            return [*prefix, *super().format_kernel_cmd(extra_arguments)]

    manager = SandboxedKernelManager(kernel_name="python3", transport="ipc", ip=str(runtime / "kernel"))
    manager.connection_file = str(runtime / "kernel.json")
    return manager


def main(argv: list[str] | None = None) -> int:
    import argparse

    from annotated.support.errors import run_command
    from annotated.support.pipes import quiet_on_closed_pipe

    parser = argparse.ArgumentParser(prog="python -m annotated.support.sandbox",
                                     description="Say whether bubblewrap is there and works (exit 0) or not (1).")
    parser.parse_args(argv)  # --help, or an unknown argument named (they were ignored)

    def body() -> int:
        found = bubblewrap()
        print(found.describe())
        return 0 if found.present else 1

    return run_command(quiet_on_closed_pipe(body), parser.prog)  # a full disk on stdout: one line


if __name__ == "__main__":
    raise SystemExit(main())
