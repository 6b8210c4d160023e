"""Nothing lost (issue 40): every command writes a file one way (``annotated.support.files``), and each
root of the losses found is reproduced here and shown to keep the file.

- a write that fails partway (a full disk, ``ulimit -f``) leaves the earlier file byte for byte;
- a symbolic link left in an output folder is never written through;
- an output that is one of the inputs, or a committed course file, is refused before any work;
- SIGTERM and SIGHUP stop a build as Ctrl-C does: no temporary folder left, exit status 130;
- a file that must be new is checked again when it is saved, so two processes cannot both create it.

The API of files.py is imported inside the tests, so that this module also runs against the code
before these fixes (each test then fails, as it should).
"""

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import nbformat
import pytest

from annotated.support.course import ROOT

resource = pytest.importorskip("resource", reason="RLIMIT_FSIZE (ulimit -f) is POSIX only")

NOTEBOOK = ROOT / "notebooks" / "01_softmax_and_scaling.ipynb"
SOLUTION = ROOT / "solutions" / "01_softmax_and_scaling.ipynb"
GUIDE = ROOT / "guide" / "03_masking.md"


def default_signals() -> None:
    """In a child: SIGHUP and SIGTERM at their defaults, whatever the suite inherited (nohup ignores SIGHUP,
    and a command rightly keeps an ignored signal ignored: a test below checks that)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def environment(**extra: str) -> dict[str, str]:
    """The environment of a command run here: no bytecode written (a write the limit would stop), one thread."""
    return {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **extra}


def run_with_file_size_limit(argv: list[str], limit: int, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """``python argv`` with ``ulimit -f`` of ``limit`` bytes: a write past it fails with EFBIG, as on a
    full disk a write fails with ENOSPC, after the bytes before it were written."""
    def limit_writes() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=cwd, env=environment(),
                          preexec_fn=limit_writes, timeout=600)


def hidden(folder: Path) -> list[str]:
    """The temporary files and folders (``.NAME.<pid>...``) left in ``folder``."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


# ---------------------------------------------------------------- a write that fails partway


def test_exercises_cut_short_by_a_file_size_limit_leave_the_solution_byte_identical(tmp_path):
    """The issue: ``python -m annotated.support.exercises`` left solutions/01 cut to 8,192 bytes of
    invalid JSON after a ``ulimit -f`` failure."""
    (tmp_path / "solutions").mkdir()
    solution = tmp_path / "solutions" / SOLUTION.name
    nb = nbformat.read(SOLUTION, as_version=4)
    del nb.cells[0].metadata["nbgrader"]  # stale nbgrader metadata: the command rewrites the solution
    nbformat.write(nb, solution)
    before = solution.read_bytes()
    assert len(before) > 8192
    script = textwrap.dedent("""
        import sys
        from pathlib import Path
        import annotated.support.exercises as exercises
        root = Path(sys.argv[1])
        exercises.ROOT, exercises.SOLUTIONS, exercises.EXERCISES = root, root / "solutions", root / "exercises"
        sys.exit(exercises.main([]))
    """)
    run = run_with_file_size_limit(["-c", script, str(tmp_path)], limit=8192)
    assert solution.read_bytes() == before, f"the solution was cut to {solution.stat().st_size} bytes"
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    assert "File too large" in run.stderr and run.stderr.count("\n") == 1, run.stderr
    assert hidden(tmp_path / "solutions") == []  # the temporary file went with the failure
    # Without the limit, the same command writes both notebooks.
    run = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                         env=environment(), timeout=600)
    assert run.returncode == 0, run.stderr
    assert nbformat.read(solution, as_version=4).cells[0].metadata["nbgrader"]
    assert (tmp_path / "exercises" / SOLUTION.name).is_file()


def test_the_guide_builder_cut_short_keeps_the_guide_page_and_its_hand_written_sections(tmp_path):
    """The issue: the guide builder cut a guide page from 9,987 to 4,096 bytes."""
    from annotated.support.guide import BEGIN, END

    page = tmp_path / GUIDE.name
    text = GUIDE.read_text(encoding="utf-8")
    head, rest = text.split(BEGIN)
    page.write_text(f"{head}{BEGIN}\nout of date\n{END}{rest.split(END)[1]}", encoding="utf-8")
    before = page.read_bytes()
    assert len(before) > 4096
    run = run_with_file_size_limit(["-m", "annotated.support.guide", str(page)], limit=4096)
    assert page.read_bytes() == before, f"the guide was cut to {page.stat().st_size} bytes"
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    assert "File too large" in run.stderr, run.stderr
    assert hidden(tmp_path) == []


# ---------------------------------------------------------------- links


def test_a_rebuild_never_writes_through_links_left_in_the_old_output_folder(tmp_path):
    """The issue: a rebuild of the decks followed a link left in the old output folder and overwrote
    the file it points to, outside ``--out``. Links to a deck, to an asset deep in the assets, and to a
    folder in place of the assets' folder: none is followed."""
    from annotated.support.slides import main

    notebook = tmp_path / "one.ipynb"
    cell = nbformat.v4.new_markdown_cell("# A slide")
    cell.metadata["slideshow"] = {"slide_type": "slide"}
    nbformat.write(nbformat.v4.new_notebook(cells=[cell]), notebook)
    out, outside = tmp_path / "decks", tmp_path / "outside"
    assert main([str(notebook), "--out", str(out)]) == 0
    (outside / "folder").mkdir(parents=True)
    mine = {"deck.html": "my deck", "reveal.js": "my script", "folder/keep.txt": "kept"}
    for name, text in mine.items():
        (outside / name).write_text(text)
    (out / "one.slides.html").unlink()
    (out / "one.slides.html").symlink_to(outside / "deck.html")
    script = out / "assets" / "reveal.js" / "dist" / "reveal.js"
    script.unlink()
    script.symlink_to(outside / "reveal.js")
    shutil.rmtree(out / "assets" / "mathjax")
    (out / "assets" / "mathjax").symlink_to(outside / "folder", target_is_directory=True)
    assert main([str(notebook), "--out", str(out)]) == 0
    assert {name: (outside / name).read_text() for name in mine} == mine
    assert sorted(p.name for p in outside.rglob("*")) == ["deck.html", "folder", "keep.txt", "reveal.js"]
    for path in (out / "one.slides.html", script, out / "assets" / "mathjax"):
        assert not path.is_symlink() and path.exists()


def test_a_build_that_adds_to_its_folder_carries_no_link_of_the_old_one(tmp_path):
    from annotated.support.files import build_folder

    out, outside = tmp_path / "decks", tmp_path / "mine.txt"
    outside.write_text("mine")
    with build_folder(out, "a test build"):
        pass
    (out / "deck.html").symlink_to(outside)
    with build_folder(out, "a test build", keep=True) as tmp:
        assert not os.path.lexists(tmp / "deck.html")
    assert outside.read_text() == "mine" and not os.path.lexists(out / "deck.html")


def test_a_file_is_never_written_through_a_link(tmp_path):
    from annotated.support.files import OutputRefused, atomic_write, write_notebook, write_text

    target, link = tmp_path / "mine.txt", tmp_path / "out.txt"
    target.write_text("mine")
    link.symlink_to(target)
    for write in (lambda: write_text(link, "new"), lambda: write_notebook(nbformat.v4.new_notebook(), link)):
        with pytest.raises(OutputRefused, match=r"out\.txt is a symbolic link \(to .*mine\.txt\).*remove the link"):
            write()
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(OutputRefused, match="is a symbolic link"):
        with atomic_write(dangling) as handle:
            handle.write(b"x")
    assert target.read_text() == "mine" and not (tmp_path / "nowhere").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling", "mine.txt", "out.txt"]


# ---------------------------------------------------------------- outputs checked against inputs


def _stub_kernel(monkeypatch, ran: list, refuse: bool = False) -> None:
    """No kernel runs: ``NotebookClient`` records the notebook it was given (and raises, with
    ``refuse``, so that a committed notebook can never be written by a failing test)."""
    import annotated.support.notebooks as notebooks

    class Client:
        def __init__(self, nb, **kwargs):
            ran.append(nb)
            if refuse:
                raise AssertionError("a kernel was started: the output was not checked before the work")

        def execute(self):
            return None

    monkeypatch.setattr(notebooks, "NotebookClient", Client)


def test_an_out_dir_equal_to_the_notebooks_folder_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    """The issue: ``--out-dir notebooks --set ...`` rewrote the committed notebook, although --help
    promises the originals are left alone. Named as the same folder in another way, or through a
    link to it, it is refused too."""
    from annotated.support.notebooks import main

    notebook = tmp_path / "course" / "01.ipynb"
    notebook.parent.mkdir()
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("small = 1\nprint(small)")]), notebook)
    before = notebook.read_bytes()
    (tmp_path / "link").symlink_to(notebook.parent, target_is_directory=True)
    ran: list = []
    _stub_kernel(monkeypatch, ran)
    for out_dir in (notebook.parent, tmp_path / "course" / ".." / "course", tmp_path / "link"):
        with pytest.raises(SystemExit) as exit_:
            main([str(notebook), "--out-dir", str(out_dir), "--set", "small=2"])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and "is the input" in err and "--out-dir keeps the originals" in err, err
        assert not ran and notebook.read_bytes() == before
    assert main([str(notebook), "--out-dir", str(tmp_path / "copies"), "--set", "small=2"]) == 0  # elsewhere: fine
    assert notebook.read_bytes() == before and "small = 2" in (tmp_path / "copies" / "01.ipynb").read_text()


@pytest.mark.parametrize("out_dir", ["notebooks", "solutions"])
def test_the_issues_command_on_the_committed_notebook_is_refused_before_any_kernel_runs(out_dir, monkeypatch,
                                                                                        capsys):
    from annotated.support.notebooks import main

    before = NOTEBOOK.read_bytes(), SOLUTION.read_bytes()
    ran: list = []
    _stub_kernel(monkeypatch, ran, refuse=True)
    monkeypatch.chdir(ROOT)
    with pytest.raises(SystemExit) as exit_:
        main([str(NOTEBOOK.relative_to(ROOT)), "--out-dir", out_dir, "--set", "small=torch.tensor([0.0, 1.0, 3.0])"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and not ran, err
    assert ("is the input" if out_dir == "notebooks" else "is a file of the course that git tracks") in err
    assert (NOTEBOOK.read_bytes(), SOLUTION.read_bytes()) == before


def test_an_output_file_is_checked_against_inputs_course_files_and_the_shipped_model(tmp_path):
    from annotated.support.files import SHIPPED_MODEL, OutputRefused, check_output_file

    data = tmp_path / "data.txt"
    data.write_text("input")
    (tmp_path / "same.txt").hardlink_to(data)
    with pytest.raises(OutputRefused, match=r"same\.txt is the input .*data\.txt"):
        check_output_file(tmp_path / "same.txt", inputs=[data])  # another name, the same file
    with pytest.raises(OutputRefused, match="is a file of the course that git tracks.*or pass --force"):
        check_output_file(SOLUTION)
    with pytest.raises(OutputRefused, match="shipped model's folder"):
        check_output_file(SHIPPED_MODEL / "model.safetensors")
    with pytest.raises(OutputRefused, match="shipped model's folder"):
        check_output_file(SHIPPED_MODEL / "new.pt")
    assert check_output_file(SOLUTION, force=True) == SOLUTION  # told to
    assert check_output_file(ROOT / "notebooks" / "not_committed.ipynb")  # a new file of the user's
    with pytest.raises(OutputRefused, match=r"already exists and is kept.*--overwrite"):
        check_output_file(data, overwrite=False)
    with pytest.raises(OutputRefused, match="is a folder; name a file"):
        check_output_file(tmp_path)
    with pytest.raises(OutputRefused, match="is a file, not a folder"):
        check_output_file(data / "out.pt")


# ---------------------------------------------------------------- a file that must be new


def test_an_exclusive_file_is_checked_again_when_it_is_saved(tmp_path):
    from annotated.support.files import OutputExists, atomic_write, write_bytes

    path = tmp_path / "run.pt"
    with pytest.raises(OutputExists, match=r"run\.pt was created by another process while this one worked"):
        with atomic_write(path, exclusive=True) as handle:
            handle.write(b"second")
            write_bytes(path, b"first", exclusive=True)  # another writer got there first, meanwhile
    assert path.read_bytes() == b"first" and sorted(p.name for p in tmp_path.iterdir()) == ["run.pt"]


def test_of_two_processes_creating_one_file_exactly_one_succeeds(tmp_path):
    path, go = tmp_path / "run.pt", tmp_path / "go"
    script = textwrap.dedent("""
        import sys, time
        from pathlib import Path
        from annotated.support.errors import run_command
        from annotated.support.files import atomic_write

        path, go, tag = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]

        def body():
            with atomic_write(path, exclusive=True) as handle:
                handle.write(tag.encode())
                while not go.exists():  # both have done their work; both save when told
                    time.sleep(0.01)
            return 0

        sys.exit(run_command(body, "writer " + tag))
    """)
    writers = [subprocess.Popen([sys.executable, "-c", script, str(path), str(go), tag], stderr=subprocess.PIPE,
                                text=True, env=environment()) for tag in ("a", "b")]
    deadline = time.monotonic() + 120
    while len(hidden(tmp_path)) < 2 and time.monotonic() < deadline:  # both temporary files written
        time.sleep(0.02)
    go.touch()
    results = [(w.wait(timeout=120), w.stderr.read()) for w in writers]
    assert sorted(code for code, _ in results) == [0, 1], results
    loser = next(err for code, err in results if code == 1)
    assert "was created by another process while this one worked" in loser and "Traceback" not in loser
    winner = "ab"[[code for code, _ in results].index(0)]
    assert path.read_bytes() == winner.encode() and hidden(tmp_path) == []


# ---------------------------------------------------------------- signals


def _assets_available() -> bool:
    from annotated.support.web_assets import ENV_VAR, PACKAGES, cache_dir

    folder = Path(os.environ[ENV_VAR]) if os.environ.get(ENV_VAR) else cache_dir()
    return all((folder / package.tarball).is_file() for package in PACKAGES)


# Runs a builder with its build_folder held open after the work: the whole output lies in the temporary
# folder, not yet swapped in, and the builder waits there until the signal comes. A signal sent "half a
# second into the work" raced the build (a fast lecture build ended first, exit 0, on a CI run).
_PAUSED_BUILD = textwrap.dedent("""
    import contextlib, runpy, sys, time
    from pathlib import Path
    from annotated.support import files

    ready, command = Path(sys.argv[1]), sys.argv[2]
    real_build_folder = files.build_folder

    @contextlib.contextmanager
    def held_open(*args, **kwargs):
        with real_build_folder(*args, **kwargs) as tmp:
            yield tmp
            ready.touch()
            time.sleep(300)  # the signal ends this sleep

    files.build_folder = held_open  # before the builder imports it
    sys.argv = [command, *sys.argv[3:]]
    runpy.run_module(f"annotated.support.{command}", run_name="__main__", alter_sys=True)
""")


@pytest.mark.parametrize("command, signum", [("site", signal.SIGTERM), ("slides", signal.SIGTERM),
                                             ("lecture", signal.SIGHUP)])
def test_a_build_stopped_by_a_signal_leaves_no_temporary_folder_and_exits_as_on_ctrl_c(tmp_path, command, signum):
    """The issue: a site build stopped by SIGTERM (timeout, Slurm, a cancelled CI job) left an 11 MB
    hidden temporary folder. SIGHUP (a closed terminal) is a Ctrl-C too."""
    if not _assets_available():
        pytest.skip("reveal.js and MathJax are not in the cache (python -m annotated.support.web_assets fetches them)")
    parent, ready = tmp_path / "build", tmp_path / "ready"
    parent.mkdir()
    argv = [sys.executable, "-c", _PAUSED_BUILD, str(ready), command, "--out", str(parent / "out")]
    build = subprocess.Popen([*argv, *(["--no-slides"] if command == "site" else [])], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, cwd=ROOT, env=environment(),
                             preexec_fn=default_signals)  # not nohup's ignored SIGHUP, should the suite run under it
    try:
        deadline = time.monotonic() + 300
        while not ready.exists():
            assert build.poll() is None, build.communicate()
            assert time.monotonic() < deadline, "the build did not finish its work in 300 s"
            time.sleep(0.02)
        assert hidden(parent), "the build's temporary folder, .out.<pid>.tmp, is not there"
        build.send_signal(signum)
        _, err = build.communicate(timeout=120)
    finally:
        if build.poll() is None:
            build.kill()
            build.communicate()
    assert build.returncode == 130, (build.returncode, err)
    assert "interrupted" in err and "Traceback" not in err, err
    assert list(parent.iterdir()) == [], "left behind: " + ", ".join(p.name for p in parent.iterdir())


def test_a_signal_during_the_swap_waits_for_its_end(tmp_path, monkeypatch):
    from annotated.support import files
    from annotated.support.files import build_folder, signals_as_interrupt

    out = tmp_path / "site"
    with build_folder(out, "a test build") as tmp:
        (tmp / "index.html").write_text("old")
    real_rename, calls = os.rename, []

    def rename_then_sigterm(src, dst):
        real_rename(src, dst)
        calls.append(dst)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGTERM)  # after the old folder moved away, before the new came in

    monkeypatch.setattr(files.os, "rename", rename_then_sigterm)
    with pytest.raises(KeyboardInterrupt, match="stopped by SIGTERM"), signals_as_interrupt():
        with build_folder(out, "a test build") as tmp:
            (tmp / "index.html").write_text("new")
    assert (out / "index.html").read_text() == "new"  # the swap finished; the signal came after it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the handler is gone with the block


def test_signals_as_interrupt_leaves_an_ignored_signal_ignored():
    from annotated.support.files import signals_as_interrupt

    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    try:
        with signals_as_interrupt():
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN)
            os.kill(os.getpid(), signal.SIGHUP)  # nothing happens
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGHUP, previous)
