"""Issue 40, the second round of bad inputs: each test reproduces one case that lost a file, gave a
silently wrong result or a raw traceback before its fix, and shows the file kept, the result right or
the one-line error that names the argument.

Every test here fails against the code before its fix (each was run so); the tests call the checks
directly where the old code would have damaged a file of this checkout.
"""

import math
import os
import subprocess
import sys

import pytest
import torch

from annotated.support.course import ROOT


def environment(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **extra}


# ---------------------------------------------------------------- the grader's gradebook


@pytest.mark.parametrize("committed", ["README.md", "pyproject.toml", "guide/03_masking.md"])
def test_a_gradebook_over_a_committed_file_of_the_checkout_is_refused_before_any_notebook_runs(committed):
    """``grade --csv README.md nb.ipynb`` graded, then replaced the course's README with a CSV (lost)."""
    from annotated.support import grade
    from annotated.support.errors import UsageError

    notebook = str(ROOT / "exercises" / "01_softmax_and_scaling.ipynb")
    with pytest.raises(UsageError, match=r"^--csv .*git tracks"):
        grade.check_outputs({"--csv": str(ROOT / committed), "--json": None}, [notebook], [])


def test_a_gradebook_that_is_a_link_is_refused_before_any_notebook_runs_and_named_by_its_option(tmp_path):
    """It was refused only at the save, after every notebook ran, and named ``--out``."""
    from annotated.support import grade
    from annotated.support.errors import UsageError

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / "grades.json").symlink_to(victim)
    with pytest.raises(UsageError, match=r"^--json .*symbolic link"):
        grade.check_outputs({"--csv": None, "--json": str(tmp_path / "grades.json")}, [], [])
    assert victim.read_text() == "precious\n"


# ---------------------------------------------------------------- annotated.schedule


@pytest.mark.parametrize("arguments, named", [
    ((1, 512, 4000, math.nan), "factor"),  # NaN rate: every weight NaN after the first update
    ((1, 512, 4000, -1.0), "factor"),  # a negative rate: a step uphill, silently
    ((1, 512, 4000, math.inf), "factor"),
    ((1, -512), "d_model"),  # a complex number
    ((1, 512, 0), "warmup"),  # ZeroDivisionError
    ((1, 0), "d_model"),
    ((-5, 512), "step"),  # read as step 1
])
def test_rate_names_an_argument_out_of_range_instead_of_a_nan_negative_or_complex_rate(arguments, named):
    from annotated.schedule import rate

    with pytest.raises(ValueError, match=rf"^{named} must be"):
        rate(*arguments)


def test_rate_still_takes_numpy_integers_and_step_zero():
    import numpy as np

    from annotated.schedule import rate

    assert rate(np.int64(3), np.int64(512)) == rate(3, 512)
    assert rate(0, 512) == rate(1, 512) > 0


@pytest.mark.parametrize("keywords, named", [({"warmup": -10}, "warmup"), ({"factor": math.inf}, "factor"),
                                             ({"warmup": 0}, "warmup")])
def test_make_optimizer_checks_its_schedule_before_the_first_rate(keywords, named):
    from annotated.schedule import make_optimizer

    with pytest.raises(ValueError, match=rf"^{named} must be"):
        make_optimizer(torch.nn.Linear(2, 2), 512, **keywords)


# ---------------------------------------------------------------- annotated.vocab, annotated.evaluation


def test_build_vocab_refuses_a_nan_min_freq_that_kept_the_specials_alone():
    from annotated.vocab import build_vocab_from_iterator

    with pytest.raises(ValueError, match=r"^min_freq must be a number of at least 1, got nan"):
        build_vocab_from_iterator([["a", "b"]], min_freq=math.nan)
    with pytest.raises(ValueError, match=r"^min_freq must be"):
        build_vocab_from_iterator([["a", "b"]], min_freq="2")  # was a TypeError from the guard itself


def test_build_vocab_refuses_a_string_of_specials_that_became_its_letters():
    from annotated.vocab import build_vocab_from_iterator

    with pytest.raises(TypeError, match=r"^specials must be a list of tokens, got a single string '<unk>'"):
        build_vocab_from_iterator([["a", "b"]], specials="<unk>")


def test_a_vocab_takes_text_tokens_and_an_integer_default_index():
    import numpy as np

    from annotated.vocab import Vocab

    with pytest.raises(TypeError, match=r"^every token of itos must be a str, got 1 \(int\)"):
        Vocab(["a", 1])
    with pytest.raises(TypeError, match=r"^default index must be an integer id"):
        Vocab(["a", "b"]).set_default_index(True)  # bool was taken as id 1
    vocab = Vocab(["a", "b"])
    vocab.set_default_index(np.int64(1))
    assert vocab["zzz"] == 1


def test_corpus_bleu_refuses_a_lowercase_that_is_not_a_bool():
    """``lowercase='no'`` is true: the score silently ignored case (100 for 'a b c d' against 'A B C D')."""
    from annotated.evaluation import corpus_bleu

    with pytest.raises(TypeError, match=r"^lowercase must be True or False, got 'no'"):
        corpus_bleu(["a b c d"], ["A B C D"], lowercase="no")
    assert corpus_bleu(["a b c d"], ["A B C D"], lowercase=False).score == 0


# ---------------------------------------------------------------- annotated.training


def _tiny_training():
    from annotated.batching import collate
    from annotated.label_smoothing import LabelSmoothingLoss
    from annotated.model import TransformerConfig, make_model
    from annotated.schedule import make_optimizer

    torch.manual_seed(0)
    model = make_model(TransformerConfig(10, 10, N=1, d_model=8, d_ff=16, h=2))
    batch = collate([([1, 5, 2], [1, 6, 2])], pad_idx=0)
    optimizer, scheduler = make_optimizer(model, 8, warmup=10)
    return model, batch, LabelSmoothingLoss(10, 0, 0.1), optimizer, scheduler


@pytest.mark.parametrize("change, named", [
    ({"epochs": 0}, "epochs"),  # an empty history, no word
    ({"epochs": -1}, "epochs"),
    ({"max_minutes": math.nan}, "max_minutes"),  # no limit at all
    ({"clip": 0.0}, "clip"),  # every gradient scaled to zero: no learning
    ({"accum_steps": 0}, "accum_steps"),  # 'range() arg 3 must not be zero'
    ({"train_batches": []}, "train_batches"),  # train loss NaN, no update
    ({"val_batches": []}, "val_batches"),  # val loss NaN
])
def test_fit_names_a_budget_or_batches_that_train_nothing(change, named):
    from annotated.training import fit

    model, batch, loss_fn, optimizer, scheduler = _tiny_training()
    arguments = {"train_batches": [batch], "val_batches": [batch], "epochs": 1, "progress": False, **change}
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError, match=rf"^{named} (must be|is empty)"):
        fit(model, loss_fn=loss_fn, optimizer=optimizer, scheduler=scheduler, **arguments)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # refused before any update


# ---------------------------------------------------------------- annotated.decoding, annotated.masks


@pytest.mark.parametrize("decoder", ["greedy_decode", "greedy_decode_simple"])
@pytest.mark.parametrize("max_len", [0, -3, 2.5])
def test_the_taught_greedy_decoders_refuse_a_max_len_below_one_instead_of_returning_bos_alone(decoder, max_len):
    from annotated import decoding
    from annotated.model import TransformerConfig, make_model

    torch.manual_seed(0)
    model = make_model(TransformerConfig(10, 10, N=1, d_model=8, d_ff=16, h=2)).eval()
    with pytest.raises(ValueError, match=r"^max_len must be a positive integer"):
        getattr(decoding, decoder)(model, torch.tensor([[1, 5, 6, 2]]), None, max_len)
    with pytest.raises(ValueError, match=r"^src must be a \(batch, L_src\) tensor of token ids"):
        getattr(decoding, decoder)(model, torch.tensor([[1.0, 5.0, 2.0]]), None, 5)


@pytest.mark.parametrize("tokens, pad_idx, named", [([[1, 2, 0]], 0, "tokens"),
                                                    (torch.tensor([[1, 2, 0]]), None, "pad_idx"),
                                                    (torch.tensor([[1, 2, 0]]), "0", "pad_idx")])
def test_padding_and_target_masks_name_a_list_of_ids_or_a_pad_idx_that_is_not_an_integer(tokens, pad_idx, named):
    from annotated.masks import padding_mask, target_mask

    for mask in (padding_mask, target_mask):
        with pytest.raises(TypeError, match=rf"^{named} must be"):
            mask(tokens, pad_idx)


# ---------------------------------------------------------------- the benchmarks' command lines


def bench(script: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], capture_output=True,
                          text=True, cwd=ROOT, env=environment(**env), timeout=300)


@pytest.mark.parametrize("script, args, named", [
    ("bench_decoding.py", ["--repeats", "0"], "--repeats"),  # was KeyError: True after the model was built
    ("bench_decoding.py", ["--threads", "-1"], "--threads"),  # was a RuntimeError traceback
    ("bench_translate.py", ["--batch-size", "0"], "--batch-size"),
])
def test_a_benchmark_names_a_count_below_one_before_any_work(script, args, named):
    done = bench(script, *args)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"argument {named}: '{args[1]}' is not a positive integer" in done.stderr


def test_a_benchmark_names_a_missing_model_in_one_line():
    done = bench("bench_translate.py", "--checkpoint", str(ROOT / "no-such-model"))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"bench_translate.py: error: no model at {ROOT / 'no-such-model'}; give a .pt checkpoint written by "
        "python -m annotated.train, or a folder written by python -m annotated.support.pretrained export"]


def test_a_benchmark_record_over_the_readme_is_refused_without_offering_a_force_it_lacks():
    readme = (ROOT / "README.md").read_bytes()
    done = bench("head_importance.py", "--out", "README.md")
    assert done.returncode == 2 and "git tracks" in done.stderr and "--force" not in done.stderr, done.stderr
    assert (ROOT / "README.md").read_bytes() == readme


@pytest.mark.parametrize("timeout", ["-5", "0"])
def test_a_notebook_run_refuses_a_timeout_that_nbclient_reads_as_no_limit(timeout, capsys, tmp_path):
    """nbclient takes a timeout of 0 or below as none: a cell that never ends would run for ever."""
    from annotated.support import notebooks

    with pytest.raises(SystemExit) as exit_:
        notebooks.main(["--timeout", timeout, str(ROOT / "notebooks" / "01_softmax_and_scaling.ipynb"),
                        "--out-dir", str(tmp_path)])
    assert exit_.value.code == 2
    assert f"argument --timeout: '{timeout}' is not a positive integer" in capsys.readouterr().err


@pytest.mark.parametrize("args, says", [
    (["--timeout", "-1"], "argument --timeout: '-1' is not a positive integer"),
    (["--out", "README.md", "--report-only"], "--out README.md is a file"),
    (["--out", "{tmp}/none", "--report-only"], "--report-only compares copies executed earlier"),
])
def test_code_paths_names_a_bad_timeout_a_file_as_out_and_copies_never_executed(args, says, tmp_path):
    done = bench("code_paths.py", str(ROOT / "notebooks" / "01_softmax_and_scaling.ipynb"),
                 *[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert says in done.stderr


# ---------------------------------------------------------------- the trainer's report on a full disk


DATA = os.environ.get("ANNOTATED_DATA_DIR")


@pytest.mark.skipif(not (DATA and os.path.isdir(DATA)), reason="needs Multi30k: set ANNOTATED_DATA_DIR")
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_train_whose_report_goes_to_a_full_disk_exits_1_and_says_so(tmp_path):
    """``train > log.txt`` on a full disk lost the whole report (BLEU, samples) and exited 0 without a word."""
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "annotated.train", "--preset", "tiny", "--limit", "20",
                               "--max-steps", "1", "--no-progress", "--threads", "1", "--out",
                               str(tmp_path / "run.pt")], stdout=full, stderr=subprocess.PIPE, text=True,
                              cwd=ROOT, env=environment(), timeout=600)
    assert done.returncode == 1, done.stderr
    assert "error: the report on the standard output was cut" in done.stderr and "No space left" in done.stderr
    assert (tmp_path / "run.pt").stat().st_size > 0  # the work itself is kept


# ---------------------------------------------------------------- the sandbox's check


def test_the_sandbox_check_names_an_unknown_argument_and_a_full_disk_in_one_line():
    """It ignored every argument (``--help`` too) and a full stdout gave an OSError traceback."""
    from annotated.support import sandbox

    with pytest.raises(SystemExit) as exit_:
        sandbox.main(["bogus"])
    assert exit_.value.code == 2
    if os.path.exists("/dev/full"):
        with open("/dev/full", "w") as full:
            done = subprocess.run([sys.executable, "-m", "annotated.support.sandbox"], stdout=full,
                                  stderr=subprocess.PIPE, text=True, cwd=ROOT, env=environment(), timeout=120)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert "No space left on device" in done.stderr


# ---------------------------------------------------------------- the grader stopped by a signal


def test_the_grader_stopped_by_sigterm_removes_its_copy_of_the_submission_and_says_so(tmp_path):
    """SIGTERM (a cancelled CI job, ``timeout``) ended the grader with status 143, no word, and the copy of
    the student's notebook left in a temporary folder."""
    import signal
    import time

    import nbformat

    nb = nbformat.read(ROOT / "exercises" / "01_softmax_and_scaling.ipynb", as_version=4)
    nb.cells.insert(1, nbformat.v4.new_code_cell("import time\ntime.sleep(120)"))
    submission = tmp_path / "01_softmax_and_scaling.ipynb"
    nbformat.write(nb, submission)
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    process = subprocess.Popen([sys.executable, "-m", "annotated.support.grade", str(submission)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                               env=environment(TMPDIR=str(temporary)),
                               preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL))  # as under nohup
    try:
        deadline = time.monotonic() + 120
        while not list(temporary.glob("annotated-grade-*")) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert list(temporary.glob("annotated-grade-*")), "the grader never made its copy"
        time.sleep(3)  # the kernel starts, the sleeping cell runs
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 128 + signal.SIGTERM, err
    assert "python -m annotated.support.grade: stopped by SIGTERM" in err
    assert list(temporary.glob("annotated-grade-*")) == []


# ---------------------------------------------------------------- annotated.heads


def test_teacher_forced_batches_and_labels_name_their_bad_arguments():
    from annotated.heads import SentenceAttention, teacher_forced_batches

    with pytest.raises(ValueError, match=r"^batch_size must be a positive integer, got 0"):
        teacher_forced_batches(None, [("Ein Hund.", "A dog.")], 0)  # was: range() arg 3 must not be zero
    with pytest.raises(TypeError, match=r"^pairs must be a list of \(German, English\) sentence pairs"):
        teacher_forced_batches(None, "Ein Hund.", 10)  # was: not enough values to unpack
    with pytest.raises(TypeError, match=r"^pairs\[0\] must be a \(German, English\) pair of str"):
        teacher_forced_batches(None, ["Ein Hund."], 10)
    maps = SentenceAttention(["<s>"], ["<s>"], ["</s>"], {})
    with pytest.raises(ValueError, match=r"^unknown kind of attention 'bad'"):  # was KeyError: 'bad'
        maps.labels("bad")
    assert maps.labels("cross") == (["<s>"], ["<s>"])
