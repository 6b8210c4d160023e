"""``python -m annotated.train`` under bad or hurried input: usage errors at parse time, no run
lost, no run mixed with another, and one or two lines that name the problem and the fix."""

import os
import signal

import pytest
import torch

import annotated.support.cli as cli
import annotated.support.distributed as distributed
from annotated.support.checkpoint import load_checkpoint, save_checkpoint
from annotated.support.cli import main

DATA_DIR = os.environ.get("ANNOTATED_DATA_DIR")
needs_data = pytest.mark.skipif(not DATA_DIR, reason="set ANNOTATED_DATA_DIR to a folder with the Multi30k "
                                                      "files (e.g. ../shared/data/multi30k) to run the CLI")
pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py


def quick(tmp_path, *more: str) -> list[str]:
    """Options of a run of a few seconds: 40 pairs (2 updates an epoch with the tiny preset), greedy evaluation."""
    return ["--data-dir", DATA_DIR or "unused", "--limit", "40", "--device", "cpu", "--no-progress",
            "--beam-size", "0", *more]


@pytest.fixture
def no_data(monkeypatch):
    """Fail the test if the command gets as far as reading the data: the error had to come first."""
    def refuse(*args, **kwargs):
        raise AssertionError("the command loaded the data before refusing its options")
    monkeypatch.setattr(cli, "load_pairs", refuse)


@pytest.mark.parametrize("option, value", [
    ("--max-steps", "0"), ("--max-steps", "-5"), ("--epochs", "-1"), ("--epochs", "0"), ("--max-minutes", "0"),
    ("--max-minutes", "nan"), ("--accum-steps", "-1"), ("--accum-steps", "0"), ("--warmup", "0"),
    ("--warmup", "-5"), ("--limit", "0"), ("--limit", "-1"), ("--beam-size", "-1"), ("--length-penalty", "nan"),
    ("--length-penalty", "-0.5"), ("--length-penalty", "inf"), ("--threads", "0"), ("--keep-last", "-1"),
    ("--save-every", "0"), ("--max-tokens", "0"), ("--seed", "-1"), ("--epochs", "2.5"), ("--device", "gpu"),
    ("--dropout", "1"), ("--dropout", "-0.1"), ("--dropout", "nan"), ("--lr-factor", "0"), ("--bpe-merges", "-1"),
    # Bounded by what is sensible: an overflow at the end of training, a hang or a crash before.
    ("--length-penalty", "500"), ("--length-penalty", "1e308"), ("--beam-size", "101"), ("--beam-size", "100000"),
    ("--threads", "10000"), ("--threads", "100000"), ("--seed", str(2**64)),
    # A factor of 1e308 overflowed Adam's step (a raw RuntimeError); 1e30 diverged to NaN weights.
    ("--lr-factor", "1e308"), ("--lr-factor", "1e30"), ("--lr-factor", "101"),
    # An empty path silently meant the default: --resume '' trained from scratch, --out '' wrote checkpoints/.
    ("--out", ""), ("--resume", ""), ("--resume", " "), ("--data-dir", ""), ("--average", ""),
])
def test_a_bad_value_is_a_usage_error_before_any_work(option, value, capsys, no_data):
    with pytest.raises(SystemExit) as exit_:
        main([option, value])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}" in err and repr(value) in err, err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_asking_for_a_gpu_that_is_not_there_is_a_usage_error(capsys, no_data):
    with pytest.raises(SystemExit) as exit_:
        main(["--device", "cuda"])
    assert exit_.value.code == 2 and "no CUDA GPU is visible" in capsys.readouterr().err


@pytest.mark.parametrize("extra", [["--resume", "x.pt"], ["--epochs", "3"], ["--preset", "cpu"], ["--keep-last", "2"]])
def test_average_with_training_options_is_a_usage_error(extra, capsys, no_data):
    with pytest.raises(SystemExit) as exit_:
        main(["--average", "a.pt", "b.pt", *extra])
    assert exit_.value.code == 2 and "--average only averages and evaluates" in capsys.readouterr().err


def test_save_every_without_keep_last_is_a_usage_error(capsys, no_data):
    with pytest.raises(SystemExit) as exit_:
        main(["--save-every", "3"])
    assert exit_.value.code == 2 and "give --keep-last N too" in capsys.readouterr().err


def test_an_output_path_that_cannot_be_written_is_refused_before_training(tmp_path, capsys, no_data):
    assert main(["--out", str(tmp_path)]) == 2  # a folder: a usage error, as files.check_output_file says
    assert "is a folder; name a file" in capsys.readouterr().err
    (tmp_path / "file").write_text("x")
    assert main(["--out", str(tmp_path / "file" / "run.pt")]) == 2  # below a file
    assert "is a file, not a folder" in capsys.readouterr().err


def test_an_existing_checkpoint_is_not_replaced_without_overwrite(tmp_path, capsys, no_data, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "notebook.pt").write_bytes(b"an earlier run")
    assert main([]) == 2  # the default --out of the notebook preset
    err = capsys.readouterr().err
    assert "checkpoints/notebook.pt already exists" in err and "--overwrite" in err and "--resume" in err
    assert (tmp_path / "checkpoints" / "notebook.pt").read_bytes() == b"an earlier run"
    # The numbered copies of --keep-last count too.
    (tmp_path / "checkpoints" / "notebook.pt").unlink()
    (tmp_path / "checkpoints" / "notebook-step000100.pt").write_bytes(b"kept")
    assert main([]) == 2
    assert "checkpoints/notebook-step000100.pt already exists" in capsys.readouterr().err
    assert (tmp_path / "checkpoints" / "notebook-step000100.pt").exists()


def test_an_unreadable_resume_file_is_one_line_without_pytorchs_unsafe_advice(tmp_path, capsys, no_data):
    assert main(["--resume", str(tmp_path / "missing.pt")]) == 1
    assert "no checkpoint at" in capsys.readouterr().err
    (tmp_path / "bad.pt").write_bytes(b"PK\x03\x04 not really a zip")
    assert main(["--resume", str(tmp_path / "bad.pt")]) == 1
    err = capsys.readouterr().err
    assert "is damaged or not a checkpoint" in err and "weights_only" not in err and "Traceback" not in err
    assert len(err.strip().splitlines()) <= 2
    torch.save({"format_version": 2, "payload": argparse_like()}, tmp_path / "unsafe.pt")
    assert main(["--resume", str(tmp_path / "unsafe.pt")]) == 1
    err = capsys.readouterr().err
    assert "other than tensors and plain data" in err and "weights_only=False" not in err


def argparse_like():
    import argparse
    return argparse.Namespace(x=1)


@needs_data
def test_resuming_keeps_the_saved_recipe_and_refuses_options_that_contradict_it(tmp_path, capsys):
    first = tmp_path / "first.pt"
    assert main(quick(tmp_path, "--preset", "tiny", "--max-steps", "2", "--seed", "3", "--out", str(first))) == 0
    saved = load_checkpoint(first)
    assert saved["extra"]["limit"] == 40 and saved["extra"]["seed"] == 3 and saved["extra"]["preset"] == "tiny"
    capsys.readouterr()
    for extra, named in [(["--preset", "notebook"], "--preset notebook, but it was trained with --preset tiny"),
                         (["--limit", "30"], "--limit 30, but it was trained with --limit 40"),
                         (["--seed", "0"], "--seed 0, but it was trained with --seed 3"),
                         (["--warmup", "7"], "--warmup 7, but it was trained with 20"),
                         (["--max-tokens", "500"], "--max-tokens 500, but it was trained with 400"),
                         (["--dropout", "0.3"], "--dropout 0.3, but it was trained with 0.1")]:
        args = [a for a in quick(tmp_path) if a not in ("--limit", "40")] + ["--resume", str(first), *extra]
        assert main(args) == 2, extra
        assert named in capsys.readouterr().err
    assert load_checkpoint(first)["step"] == 2  # nothing was trained or written
    # Without --limit the saved one is used: the same 40 pairs, the same vocabulary.
    args = [a for a in quick(tmp_path) if a not in ("--limit", "40")]
    assert main([*args, "--resume", str(first), "--max-steps", "3", "--epochs", "10"]) == 0
    assert "40 training pairs" in capsys.readouterr().out
    resumed = load_checkpoint(first)
    assert resumed["step"] == 3 and resumed["vocabs"] == saved["vocabs"] and resumed["extra"]["limit"] == 40


@needs_data
def test_averaging_two_runs_or_overwriting_a_run_needs_an_explicit_choice(tmp_path, capsys):
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    assert main(quick(tmp_path, "--preset", "tiny", "--max-steps", "2", "--out", str(a))) == 0
    assert main(quick(tmp_path, "--preset", "tiny", "--max-steps", "3", "--epochs", "5", "--out", str(b))) == 0
    capsys.readouterr()
    assert main(quick(tmp_path, "--average", str(a), str(b))) == 1  # same recipe and data, two runs
    assert "from run" in capsys.readouterr().err
    # A second run into b.pt: refused, then done with --overwrite.
    assert main(quick(tmp_path, "--preset", "tiny", "--max-steps", "2", "--out", str(b))) == 2
    assert load_checkpoint(b)["step"] == 3
    assert main(quick(tmp_path, "--preset", "tiny", "--max-steps", "2", "--out", str(b), "--overwrite")) == 0
    assert load_checkpoint(b)["step"] == 2


@needs_data
def test_overwrite_removes_the_earlier_runs_numbered_checkpoints_so_that_runs_never_mix(tmp_path, capsys):
    out = tmp_path / "run.pt"
    args = quick(tmp_path, "--preset", "tiny", "--epochs", "2", "--keep-last", "2", "--out", str(out))
    assert main(args) == 0
    earlier = sorted(tmp_path.glob("run-step*.pt"))
    assert len(earlier) == 2
    assert main(args) == 2
    assert "run.pt already exists and 2 numbered checkpoint(s) beside it" in capsys.readouterr().err
    assert main([*args, "--overwrite", "--epochs", "1"]) == 0
    kept = sorted(tmp_path.glob("run-step*.pt"))
    runs = {load_checkpoint(path)["extra"]["run_id"] for path in kept}
    assert len(kept) == 1 and runs == {load_checkpoint(out)["extra"]["run_id"]}


@needs_data
def test_ctrl_c_during_training_saves_the_checkpoint_and_exits_130(tmp_path, capsys, monkeypatch):
    real_step, calls = distributed.train_step, []

    def step_then_ctrl_c(*args, **kwargs):
        loss = real_step(*args, **kwargs)
        calls.append(1)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGINT)  # as a Ctrl-C in the terminal would
        return loss

    monkeypatch.setattr(distributed, "train_step", step_then_ctrl_c)
    out = tmp_path / "run.pt"
    # As in a terminal: Ctrl-C raises KeyboardInterrupt (a process started in the background,
    # as pytest may be, ignores SIGINT, and the command leaves that alone).
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert main(quick(tmp_path, "--preset", "tiny", "--epochs", "20", "--out", str(out))) == 130
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is put back
    finally:
        signal.signal(signal.SIGINT, outer)
    captured = capsys.readouterr()
    assert "Ctrl-C: stopping after this update" in captured.out and f"--resume {out}" in captured.out
    assert "BLEU" not in captured.out  # no evaluation after an interrupt
    assert load_checkpoint(out)["step"] == 2  # the updates done are kept


def test_save_checkpoint_refuses_an_unloadable_extra_before_replacing_the_good_file(tmp_path):
    from pathlib import Path

    from annotated.model import TransformerConfig, make_model
    from annotated.support.checkpoint import CheckpointError

    model = make_model(TransformerConfig(8, 8, N=1, d_model=8, d_ff=8, h=2))
    path = save_checkpoint(tmp_path / "m.pt", model, step=1)
    with pytest.raises(CheckpointError):
        save_checkpoint(path, model, step=2, extra={"out": Path("x")})
    assert load_checkpoint(path)["step"] == 1


def test_an_unexpected_error_keeps_its_traceback(monkeypatch, no_data):
    def bug(args, ctx):
        raise RuntimeError("a bug, not bad input")

    monkeypatch.setattr(cli, "run", bug)
    with pytest.raises(RuntimeError, match="a bug, not bad input"):
        main([])


def test_a_checkpoint_gets_the_permissions_of_the_umask(tmp_path):
    from annotated.model import TransformerConfig, make_model

    model = make_model(TransformerConfig(8, 8, N=1, d_model=8, d_ff=8, h=2))
    old = os.umask(0o022)
    try:
        path = save_checkpoint(tmp_path / "m.pt", model)
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644  # readable by the others who share the folder


def test_the_real_command_exits_2_for_a_bad_option_and_1_with_one_line_for_a_missing_file(tmp_path):
    import subprocess
    import sys

    from annotated.support.course import ROOT

    bad = subprocess.run([sys.executable, "-m", "annotated.train", "--max-steps", "0"], capture_output=True,
                         text=True, cwd=tmp_path, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert bad.returncode == 2 and "argument --max-steps: '0' is not a positive integer" in bad.stderr
    missing = subprocess.run([sys.executable, "-m", "annotated.train", "--resume", "nothing.pt"],
                             capture_output=True, text=True, cwd=tmp_path, timeout=120,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    assert missing.stderr.strip().splitlines() == [
        "python -m annotated.train: error: no checkpoint at nothing.pt; check the path, or train without "
        "--resume to start from scratch"]
    assert list(tmp_path.iterdir()) == []  # nothing written


@needs_data
def test_a_beam_wider_than_the_vocabulary_is_refused_before_training(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cli, "fit_distributed", lambda *a, **k: pytest.fail("training started"))
    args = [a for a in quick(tmp_path) if a not in ("--beam-size", "0")]
    assert main([*args, "--preset", "tiny", "--bpe-merges", "0", "--limit", "5", "--beam-size", "100",
                 "--out", str(tmp_path / "run.pt")]) == 2
    assert "--beam-size 100 is wider than the model's target vocabulary of" in capsys.readouterr().err


@needs_data
def test_overwrite_keeps_the_earlier_runs_checkpoints_until_the_new_run_has_saved(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run.pt"
    earlier = [tmp_path / "run.pt", tmp_path / "run-step000001.pt", tmp_path / "run-step000002.pt"]
    for path in earlier:
        path.write_bytes(b"the earlier run")

    def interrupted_before_any_save(*args, **kwargs):
        raise KeyboardInterrupt  # a second Ctrl-C, or a crash, before the first checkpoint of the new run

    monkeypatch.setattr(cli, "fit_distributed", interrupted_before_any_save)
    assert main(quick(tmp_path, "--preset", "tiny", "--keep-last", "2", "--overwrite", "--out", str(out))) == 130
    assert all(path.read_bytes() == b"the earlier run" for path in earlier)


@needs_data
def test_a_full_disk_at_the_checkpoint_saves_it_elsewhere_and_says_where(tmp_path, capsys, monkeypatch):
    import errno

    real_save, elsewhere = cli.save_checkpoint, tmp_path / "elsewhere"
    elsewhere.mkdir()

    def full_disk_in_runs(path, *args, **kwargs):
        if tmp_path / "runs" in path.parents:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_save(path, *args, **kwargs)

    monkeypatch.setattr(cli, "save_checkpoint", full_disk_in_runs)
    monkeypatch.setattr(cli, "rescue_folders", lambda path: [elsewhere])
    out = tmp_path / "runs" / "run.pt"
    # --out was not written: the command fails (exit 1, as a script or CI job must see), naming where
    # the work was rescued; it used to exit 0 with --out missing.
    assert main(quick(tmp_path, "--preset", "tiny", "--max-steps", "2", "--out", str(out))) == 1
    captured = capsys.readouterr()
    rescued = elsewhere / "run-rescued.pt"
    assert f"could not write {out} ({out}: No space left on device; free space on that disk" in captured.out
    assert f"saved in {rescued} instead" in captured.out and f"--resume {rescued}" in captured.out
    assert "BLEU on val" in captured.out  # the run's work is done and reported before the error
    error = captured.err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith(f"python -m annotated.train: error: --out {out} was not written")
    assert f"rescued to {rescued}" in error[0] and f"--resume {rescued}" in error[0]
    assert load_checkpoint(rescued)["step"] == 2 and not out.exists()  # the weights are kept
    # Nowhere to go: one line that says where to free how much, not a traceback.
    monkeypatch.setattr(cli, "rescue_folders", lambda path: [])
    assert main(quick(tmp_path, "--preset", "tiny", "--max-steps", "2", "--out", str(tmp_path / "runs" / "b.pt"))) == 1
    err = capsys.readouterr().err
    assert "could not write the checkpoint" in err and "the weights of this run are lost. Free less than 1 MB" in err
    assert f"MB in {(tmp_path / 'runs').resolve()}" in err and "Traceback" not in err
