"""``python -m annotated.train`` under the faults of real machines (issue 40): the signals a job
scheduler, ``timeout`` or a closed terminal send, a second run writing to the same --out, a full
disk, and outputs that are links, inputs, course files or the shipped model. Each test reproduces a
run that lost or silently replaced a checkpoint, and shows the file now kept."""

import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import annotated.support.checkpoint as checkpoint_module
import annotated.support.cli as cli
from annotated.support.checkpoint import load_checkpoint
from annotated.support.cli import main
from annotated.support.course import ROOT

DATA_DIR = os.environ.get("ANNOTATED_DATA_DIR")
needs_data = pytest.mark.skipif(not DATA_DIR, reason="set ANNOTATED_DATA_DIR to a folder with the Multi30k "
                                                      "files (e.g. ../shared/data/multi30k) to run the CLI")
pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py


def quick(*more: str) -> list[str]:
    """Options of a run of a few seconds: 40 pairs (3 updates an epoch with the tiny preset), greedy evaluation."""
    return ["--data-dir", DATA_DIR or "unused", "--limit", "40", "--device", "cpu", "--no-progress",
            "--beam-size", "0", "--preset", "tiny", *more]


@pytest.fixture
def no_data(monkeypatch):
    """Fail the test if the command gets as far as reading the data: the error had to come first."""
    def refuse(*args, **kwargs):
        raise AssertionError("the command loaded the data before refusing its options")
    monkeypatch.setattr(cli, "load_pairs", refuse)


def default_signals() -> None:
    """In the child: SIGHUP and SIGTERM as a terminal leaves them, whatever the suite inherited (under
    nohup SIGHUP is ignored, and the command rightly keeps it ignored: see the test of that below)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def command(*args: str, cwd: Path, **popen) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "annotated.train", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=default_signals, **popen)


# ---------------------------------------------------------------------------------------------
# Signals: SIGTERM (timeout, Slurm, Kubernetes, a cancelled CI job) and SIGHUP (a closed terminal)
# used to end a run at once, with no checkpoint and no word (exit 143).

@needs_data
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_or_sighup_during_training_saves_the_checkpoint_says_how_to_resume_and_exits_128_plus_n(
        tmp_path, signum):
    out = tmp_path / "run.pt"
    # Without --no-progress each epoch prints a line: once one is there, training is under way.
    args = [a for a in quick("--epochs", "100000", "--out", str(out), "--threads", "1") if a != "--no-progress"]
    process = command(*args, cwd=tmp_path)
    try:
        lines = []
        for line in process.stdout:
            lines.append(line)
            if line.startswith("epoch 1:"):
                break
        else:
            pytest.fail(f"training never started: {''.join(lines)}{process.stderr.read()}")
        process.send_signal(signum)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
        process.wait()
    name = signal.Signals(signum).name
    assert process.returncode == 128 + signum, (process.returncode, stdout, stderr)  # 143, 129: as the shell says
    assert f"{name} " in stdout and "stopping after this update to save the checkpoint" in stdout
    assert f"interrupted by {name}: continue with --resume {out}" in stdout
    assert "Traceback" not in stderr and "BLEU" not in stdout  # no evaluation after a stop
    saved = load_checkpoint(out)
    assert saved["step"] >= 3  # at least the first epoch's updates are kept
    if signum == signal.SIGTERM:  # and the run goes on from them, as the message says
        resumed = subprocess.run([sys.executable, "-m", "annotated.train",
                                  *quick("--resume", str(out), "--epochs", "100000",
                                         "--max-steps", str(saved["step"] + 1))],
                                 cwd=tmp_path, capture_output=True, text=True, timeout=300,
                                 env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert resumed.returncode == 0, resumed.stderr
        assert load_checkpoint(out)["step"] == saved["step"] + 1


@pytest.fixture
def signals_caught():
    """SIGTERM and SIGHUP sent to this process during the test are recorded, not fatal: a command
    that does not handle them fails its test instead of killing pytest."""
    caught = []
    previous = {signum: signal.signal(signum, lambda n, frame: caught.append(n))
                for signum in (signal.SIGTERM, signal.SIGHUP)}
    yield caught
    for signum, handler in previous.items():
        signal.signal(signum, handler)


SIGTERM_WHILE_LOADING = """
import os, signal, sys, time
import annotated.support.cli as cli

def terminated_while_loading(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)  # as `timeout` or a scheduler would, while the data loads
    time.sleep(30)
    print("SIGTERM did not stop the command")

cli.load_pairs = terminated_while_loading
sys.exit(cli.main(sys.argv[1:]))
"""


def test_sigterm_before_training_ends_the_command_with_one_line_and_exit_143(tmp_path):
    result = subprocess.run([sys.executable, "-c", SIGTERM_WHILE_LOADING, *quick("--out", str(tmp_path / "run.pt"))],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 143 and result.stdout == ""  # was -15: killed without a word
    assert result.stderr.strip() == "python -m annotated.train: stopped by SIGTERM"
    assert list(tmp_path.iterdir()) == []


def test_a_signal_ignored_by_the_parent_stays_ignored(monkeypatch):
    # nohup ignores SIGHUP, a shell's background job SIGINT: the command leaves that choice alone.
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with cli.signals_as_interrupt(), cli.StopOnInterrupt(cli.DistributedContext()):
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN)
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)


@pytest.fixture
def ctrl_c_raises():
    """As in a terminal: Ctrl-C raises KeyboardInterrupt (a process started in the background, as
    pytest may be, ignores SIGINT, and the command leaves that alone)."""
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, outer)


@needs_data
def test_a_second_sigterm_quits_at_once_and_leaves_no_half_checkpoint(tmp_path, capsys, monkeypatch, signals_caught):
    import annotated.support.distributed as distributed

    real_step = distributed.train_step

    def step_then_two_signals(*args, **kwargs):
        loss = real_step(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)  # "stop after this update"
        os.kill(os.getpid(), signal.SIGTERM)  # "now": the impatient scheduler, or the user
        return loss

    monkeypatch.setattr(distributed, "train_step", step_then_two_signals)
    assert main(quick("--epochs", "20", "--out", str(tmp_path / "run.pt"))) == 143
    assert "stopped by SIGTERM" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [] and signals_caught == []


@needs_data
def test_a_signal_during_the_final_save_waits_for_the_checkpoint(tmp_path, capsys, monkeypatch, signals_caught):
    real_save = cli.save_checkpoint

    def sigterm_while_saving(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)  # arrives while the checkpoint is being written
        return real_save(*args, **kwargs)

    monkeypatch.setattr(cli, "save_checkpoint", sigterm_while_saving)
    out = tmp_path / "run.pt"
    assert main(quick("--max-steps", "2", "--out", str(out))) == 143
    captured = capsys.readouterr()
    assert f"interrupted by SIGTERM: continue with --resume {out}" in captured.out and "BLEU" not in captured.out
    assert load_checkpoint(out)["step"] == 2


@needs_data
def test_ctrl_c_at_the_full_disk_prompt_gives_up_at_once(tmp_path, capsys, monkeypatch, ctrl_c_raises):
    def full_disk(path, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    def prompt(text):
        os.kill(os.getpid(), signal.SIGINT)  # the user gives up
        time.sleep(1)
        raise AssertionError("Ctrl-C at the prompt did not give up")

    monkeypatch.setattr(cli, "save_checkpoint", full_disk)
    monkeypatch.setattr(cli, "rescue_folders", lambda path: [])
    monkeypatch.setattr(cli.sys.stdin, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(cli, "input", prompt, raising=False)
    assert main(quick("--max-steps", "2", "--out", str(tmp_path / "run.pt"))) == 130
    assert "interrupted" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# Two runs with one --out: the check before the work is made again at save time.

def another_run_saves_meanwhile(monkeypatch, path: Path, content: bytes = b"the other run's checkpoint",
                                before: bool = False):
    """Make another process write ``path`` after the command checked its outputs, at the end of
    training (or ``before`` it), as a second run with the same --out does when it saves first."""
    real_fit = cli.fit_distributed

    def fit_while_another_run_saves(*args, **kwargs):
        if before:
            path.write_bytes(content)
        history = real_fit(*args, **kwargs)
        if not before:
            path.write_bytes(content)
        return history

    monkeypatch.setattr(cli, "fit_distributed", fit_while_another_run_saves)


@needs_data
@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]], ids=["new", "overwrite"])
def test_a_checkpoint_another_run_wrote_meanwhile_is_kept_and_ours_saved_beside_it(tmp_path, capsys, monkeypatch,
                                                                                  overwrite):
    out = tmp_path / "run.pt"
    if overwrite:
        out.write_bytes(b"an earlier run, which --overwrite may replace")
    another_run_saves_meanwhile(monkeypatch, out)
    # It used to replace the other run's checkpoint without a word and exit 0.
    assert main(quick("--max-steps", "2", "--out", str(out), *overwrite)) == 1
    captured = capsys.readouterr()
    assert out.read_bytes() == b"the other run's checkpoint"  # kept
    [beside] = [path for path in tmp_path.glob("run-*.pt")]
    ours = load_checkpoint(beside)
    assert ours["step"] == 2 and beside.name == f"run-{ours['extra']['run_id']}.pt"
    assert f"this run's checkpoints are saved as {beside} instead" in captured.out
    assert "BLEU on val" in captured.out
    error = captured.err.strip().splitlines()
    assert len(error) == 1 and f"--out {out} was written by another run while this one trained" in error[0]
    assert f"this run's checkpoint is {beside}" in error[0]


@needs_data
def test_keep_last_never_removes_or_replaces_another_runs_numbered_checkpoint(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run.pt"
    theirs = tmp_path / "run-step000001.pt"  # the oldest name: the rotation removed it first
    another_run_saves_meanwhile(monkeypatch, theirs, b"the other run's numbered checkpoint", before=True)
    assert main(quick("--epochs", "3", "--keep-last", "1", "--out", str(out))) == 0
    assert theirs.read_bytes() == b"the other run's numbered checkpoint"
    assert [path.name for path in cli.kept_checkpoints(out)] == ["run-step000001.pt", "run-step000009.pt"]


@needs_data
def test_two_real_runs_with_one_out_never_lose_a_checkpoint(tmp_path):
    out = tmp_path / "run.pt"
    args = [*quick("--max-steps", "3", "--out", str(out), "--threads", "1")]
    runs = [command(*args, cwd=tmp_path) for _ in range(2)]
    results = [(*run.communicate(timeout=300), run.returncode) for run in runs]
    codes = sorted(code for _, _, code in results)
    # One run writes --out; the other is refused before its work (2) or, when both had started,
    # keeps its model beside --out and fails (1). It used to replace the first one's silently (0, 0).
    assert codes in ([0, 1], [0, 2]), results
    run_ids = {load_checkpoint(path)["extra"]["run_id"] for path in tmp_path.glob("run*.pt")}
    assert len(run_ids) == (2 if codes == [0, 1] else 1)


# ---------------------------------------------------------------------------------------------
# A full disk at --out: the checkpoint is rescued elsewhere, and the command fails.

@needs_data
def test_a_checkpoint_rescued_elsewhere_is_a_failure_of_the_command(tmp_path, capsys, monkeypatch):
    real_save, elsewhere = cli.save_checkpoint, tmp_path / "elsewhere"
    elsewhere.mkdir()

    def full_disk_in_runs(path, *args, **kwargs):
        if tmp_path / "runs" in path.parents:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_save(path, *args, **kwargs)

    monkeypatch.setattr(cli, "save_checkpoint", full_disk_in_runs)
    monkeypatch.setattr(cli, "rescue_folders", lambda path: [elsewhere])
    (elsewhere / "run-rescued.pt").write_bytes(b"a rescued checkpoint of another run")
    out = tmp_path / "runs" / "run.pt"
    assert main(quick("--max-steps", "2", "--out", str(out))) == 1  # was 0, with --out never written
    err = capsys.readouterr().err
    [rescued] = [p for p in elsewhere.iterdir() if p.name != "run-rescued.pt"]
    assert f"--out {out} was not written" in err and f"rescued to {rescued}" in err
    assert load_checkpoint(rescued)["step"] == 2
    assert (elsewhere / "run-rescued.pt").read_bytes() == b"a rescued checkpoint of another run"  # not replaced


@needs_data
def test_a_run_stopped_by_sigterm_with_a_rescued_checkpoint_names_it(tmp_path, capsys, monkeypatch, signals_caught):
    real_save, elsewhere = cli.save_checkpoint, tmp_path / "elsewhere"
    elsewhere.mkdir()

    def full_disk_but_elsewhere(path, *args, **kwargs):
        if path.parent != elsewhere:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_save(path, *args, **kwargs)

    monkeypatch.setattr(cli, "save_checkpoint", full_disk_but_elsewhere)
    monkeypatch.setattr(cli, "rescue_folders", lambda path: [elsewhere])
    real_fit = cli.fit_distributed

    def fit_then_sigterm(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        return real_fit(*args, **kwargs)

    monkeypatch.setattr(cli, "fit_distributed", fit_then_sigterm)
    assert main(quick("--max-steps", "2", "--out", str(tmp_path / "run.pt"))) == 143
    captured = capsys.readouterr()
    rescued = elsewhere / "run-rescued.pt"
    assert f"continue with --resume {rescued}" in captured.out and f"rescued to {rescued}" in captured.err


@needs_data
def test_weights_that_diverged_to_nan_replace_no_checkpoint(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run.pt"
    assert main(quick("--max-steps", "2", "--out", str(out))) == 0
    real_fit = cli.fit_distributed

    def fit_then_diverge(model, *args, **kwargs):
        history = real_fit(model, *args, **kwargs)
        with torch.no_grad():
            next(model.parameters()).fill_(float("nan"))  # as a learning rate far too high leaves them
        return history

    monkeypatch.setattr(cli, "fit_distributed", fit_then_diverge)
    capsys.readouterr()
    # It used to save the NaN weights over the resumed checkpoint, then end in a raw ValueError traceback.
    assert main(quick("--resume", str(out), "--max-steps", "3")) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "hold NaN or infinite values" in err[0] and f"nothing was saved to {out}" in err[0]
    assert load_checkpoint(out)["step"] == 2  # the last good checkpoint is kept


# ---------------------------------------------------------------------------------------------
# Outputs refused before any work: the shipped model, another format, a link, an input, a course file.

def test_the_shipped_weights_are_refused_as_out_even_with_overwrite(capsys, no_data):
    shipped = ROOT / "annotated" / "pretrained" / "model.safetensors"
    before = shipped.read_bytes()
    # It used to train and then write a torch checkpoint over the shipped safetensors file.
    assert main(["--out", str(shipped), "--overwrite"]) == 2
    assert main(["--out", str(shipped), "--overwrite", "--force"]) == 2  # another format, whatever the force
    err = capsys.readouterr().err
    assert "ends in .safetensors, the suffix of another format" in err and "name it .pt" in err
    assert shipped.read_bytes() == before


def test_a_new_file_in_the_shipped_model_folder_needs_force(capsys, no_data):
    target = ROOT / "annotated" / "pretrained" / "mine.pt"
    assert main(["--out", str(target)]) == 2
    err = capsys.readouterr().err
    assert "is in the shipped model's folder" in err and "--force" in err
    with pytest.raises(AssertionError, match="loaded the data"):  # past the checks: --force says so
        main(["--out", str(target), "--force"])
    assert not target.exists()


@pytest.mark.parametrize("name, message", [
    ("model.safetensors", "the suffix of another format"), ("notes.json", "the suffix of another format"),
    ("train.de.gz", "is the name of a Multi30k data file"), ("val.en.gz", "is the name of a Multi30k data file"),
])
def test_an_out_named_for_another_format_or_a_data_file_is_refused(tmp_path, capsys, no_data, name, message):
    target = tmp_path / name
    target.write_bytes(b"kept")
    assert main(["--out", str(target), "--overwrite"]) == 2
    assert message in capsys.readouterr().err and target.read_bytes() == b"kept"


@pytest.mark.parametrize("committed", [".gitignore", "annotated/pretrained/SHA256SUMS", ".git/HEAD"])
def test_a_committed_course_file_is_refused_even_with_force(capsys, no_data, committed):
    path = ROOT / committed
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    before = path.read_bytes()
    assert main(["--out", str(path), "--overwrite", "--force"]) == 2
    assert "is a file of the course" in capsys.readouterr().err and path.read_bytes() == before


def test_an_out_that_is_a_symbolic_link_is_never_written_through(tmp_path, capsys, no_data):
    precious = tmp_path / "precious.pt"
    precious.write_bytes(b"kept")
    link = tmp_path / "run.pt"
    link.symlink_to(precious)
    assert main(["--out", str(link), "--overwrite"]) == 2
    assert f"is a symbolic link (to {precious}); the command never writes through" in capsys.readouterr().err
    assert link.is_symlink() and precious.read_bytes() == b"kept"
    dangling = tmp_path / "dangling.pt"
    dangling.symlink_to(tmp_path / "elsewhere" / "x.pt")
    assert main(["--out", str(dangling)]) == 2 and not (tmp_path / "elsewhere").exists()


def test_an_average_written_over_one_of_its_inputs_under_another_name_is_refused(tmp_path, capsys, no_data,
                                                                                 tiny_bpe_checkpoint):
    copy = tmp_path / "a.pt"
    shutil.copy(tiny_bpe_checkpoint, copy)
    alias = tmp_path / "alias.pt"
    os.link(copy, alias)  # a hard link: the same file by another name
    assert main(["--average", str(copy), "--out", str(alias), "--overwrite"]) == 2
    assert f"--out {alias} is the input {copy}" in capsys.readouterr().err


@pytest.mark.parametrize("option", ["--out", "--resume", "--average"])
def test_a_fifo_or_a_folder_is_one_line_naming_what_it_is(tmp_path, capsys, no_data, option):
    fifo = tmp_path / "pipe.pt"
    os.mkfifo(fifo)
    folder = tmp_path / "folder.pt"
    folder.mkdir()
    for path, what in [(fifo, "is a named pipe (FIFO)"), (folder, "is a folder")]:
        # No hang reading a pipe, no "no checkpoint at" for what exists; a folder as --out is a usage error.
        assert main([option, str(path)]) == (2 if option == "--out" and path == folder else 1)
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and what in err[0] and "no checkpoint at" not in err[0], err


# ---------------------------------------------------------------------------------------------
# Every write of the trainer: a temporary file beside the target, flushed to disk, renamed or linked.

@needs_data
def test_every_checkpoint_the_trainer_writes_goes_through_a_temporary_file_flushed_then_renamed(tmp_path,
                                                                                               monkeypatch):
    real_save, real_fsync, written, synced = torch.save, os.fsync, [], []

    def recording_save(obj, f, *args, **kwargs):
        inode = os.fstat(f.fileno()).st_ino  # the file being written: which name has it?
        written.append([path for path in tmp_path.iterdir() if path.stat().st_ino == inode])
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(checkpoint_module.torch, "save", recording_save)
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    out = tmp_path / "run.pt"
    assert main(quick("--epochs", "2", "--keep-last", "2", "--out", str(out))) == 0
    assert len(written) == 3 and all(len(names) == 1 and names[0].name.startswith(".") and names[0].suffix == ".tmp"
                                     for names in written), written
    assert len(synced) >= len(written)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run-step000003.pt", "run-step000006.pt", "run.pt"]
