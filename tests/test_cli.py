"""``python -m annotated.train``: presets, options, and a run end to end that saves and resumes."""

import os
import subprocess
import sys

import pytest

from annotated.model import TransformerConfig, count_parameters, make_model
from annotated.support.checkpoint import load_checkpoint, model_from_checkpoint, vocabs_from_checkpoint
from annotated.support.cli import PRESETS, build_parser, main, recipe
from annotated.support.course import ROOT

DATA_DIR = os.environ.get("ANNOTATED_DATA_DIR")
needs_data = pytest.mark.skipif(not DATA_DIR, reason="set ANNOTATED_DATA_DIR to a folder with the Multi30k "
                                                      "files (e.g. ../shared/data/multi30k) to run the CLI")


pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py


def test_base_preset_is_the_papers_base_model_with_about_25000_tokens_per_update():
    base = PRESETS["base"]
    assert (base.N, base.d_model, base.h, base.d_ff, base.dropout) == (6, 512, 8, 2048, 0.1)  # Table 3
    assert base.warmup == 4000 and base.label_smoothing == 0.1  # §5.3, §5.4
    assert base.max_tokens * base.accum_steps == 25000  # §5.1
    assert (base.beam_size, base.length_penalty) == (4, 0.6)  # §6.1


def test_cpu_preset_is_a_few_million_parameters_and_a_fixed_number_of_updates():
    cpu = PRESETS["cpu"]
    # 8,000 byte-pair merges give Multi30k a shared vocabulary of about 8,400 pieces, one matrix for three uses.
    model = make_model(TransformerConfig(8400, 8400, N=cpu.N, d_model=cpu.d_model, d_ff=cpu.d_ff, h=cpu.h,
                                         share_embeddings=True))
    assert 3e6 < count_parameters(model) < 8e6  # float16 weights under the shipped model's 16 MB
    # Updates, not minutes: a slower machine trains the same model, only later. 12 epochs of 166 updates.
    assert cpu.max_steps == 1992 and cpu.max_minutes is None and cpu.bpe_merges == 8000


def test_notebook_preset_is_notebook_09s_recipe_with_a_fixed_number_of_updates():
    notebook = PRESETS["notebook"]
    assert (notebook.N, notebook.d_model, notebook.h, notebook.d_ff) == (2, 128, 4, 512)
    assert (notebook.max_tokens, notebook.warmup, notebook.lr_factor, notebook.max_steps) == (1500, 400, 0.5, 1100)
    assert notebook.bpe_merges == 4000  # byte-pair pieces and three-way tying, as notebook 11 trains
    assert notebook.max_minutes is None


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_use_the_papers_dropout_sites_only(name):
    preset = PRESETS[name]
    # §5.4: P_drop = 0.1 on sub-layer outputs and embedding sums; notebook 11's 1,100 updates use none, a
    # choice recorded by benchmarks/tune_short_run.py (benchmarks/results/short_run_choice.json)
    assert preset.dropout == (0.0 if name == "notebook" else 0.1)
    assert preset.attention_dropout == 0.0 and preset.ff_dropout == 0.0  # not in the paper


def test_command_line_options_override_the_preset():
    args = build_parser().parse_args(["--preset", "base", "--epochs", "3", "--max-tokens", "1000",
                                      "--beam-size", "0", "--warmup", "10", "--dropout", "0.25", "--lr-factor", "2"])
    preset = recipe(args)
    assert (preset.epochs, preset.max_tokens, preset.beam_size, preset.warmup) == (3, 1000, 0, 10)
    assert (preset.dropout, preset.lr_factor) == (0.25, 2.0)
    assert preset.d_model == 512 and preset.accum_steps == PRESETS["base"].accum_steps  # the rest stays


def test_the_module_runs_from_the_command_line():
    result = subprocess.run([sys.executable, "-m", "annotated.train", "--help"], capture_output=True, text=True,
                            cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    for option in ["--preset", "--data-dir", "--out", "--resume", "--epochs", "--max-minutes", "--device",
                   "--beam-size", "--limit", "--max-steps"]:
        assert option in result.stdout


@needs_data
def test_training_saves_a_checkpoint_reports_bleu_and_resumes(tmp_path, capsys):
    common = ["--data-dir", DATA_DIR, "--limit", "120", "--device", "cpu", "--no-progress", "--beam-size", "2"]
    first = tmp_path / "first.pt"
    assert main([*common, "--preset", "tiny", "--max-steps", "3", "--out", str(first)]) == 0
    out = capsys.readouterr().out
    # Settings are chosen on the validation split: that is what a run reports by default.
    assert "BLEU on val (120 sentences, beam 2, alpha 0.6" in out
    assert "sacrebleu signature: nrefs:1|case:lc|eff:no|tok:13a|smooth:exp|version:" in out

    checkpoint = load_checkpoint(first)
    assert checkpoint["step"] == 3 and checkpoint["config"]["d_model"] == PRESETS["tiny"].d_model
    vocabs = vocabs_from_checkpoint(checkpoint)
    assert vocabs["src"].get_itos()[:4] == ["<pad>", "<s>", "</s>", "<unk>"]
    assert model_from_checkpoint(checkpoint).src_embed[0].lut.num_embeddings == len(vocabs["src"])

    second = tmp_path / "second.pt"
    # No --preset: the recipe comes from the checkpoint; a budget may be raised.
    assert main([*common, "--resume", str(first), "--max-steps", "5", "--out", str(second)]) == 0
    assert f"resuming from {first} at step 3" in capsys.readouterr().out
    resumed = load_checkpoint(second)
    assert resumed["step"] == 5
    assert resumed["extra"]["recipe"] == {**checkpoint["extra"]["recipe"], "beam_size": 2, "max_steps": 5}
    assert resumed["extra"]["run_id"] == checkpoint["extra"]["run_id"]  # one run, so the two may be averaged
    assert len(resumed["extra"]["history"]["step_loss"]) == 5  # 3 before the resume, 2 after
    assert resumed["vocabs"] == checkpoint["vocabs"]  # the vocabularies travel with the checkpoint

    averaged = tmp_path / "averaged.pt"
    assert main([*common, "--average", str(first), str(second), "--out", str(averaged), "--split", "test"]) == 0
    out = capsys.readouterr().out
    assert "averaged 2 checkpoints" in out and "BLEU on test_2016_flickr (120 sentences" in out
    assert load_checkpoint(averaged)["extra"]["averaged"] == [str(first), str(second)]

    # One checkpoint counted twice, or the average written over one of its inputs, is refused.
    assert main([*common, "--average", str(first), str(first)]) == 1
    assert "appears twice" in capsys.readouterr().err
    assert main([*common, "--average", str(first), str(second), "--out", str(second), "--overwrite"]) == 2
    assert f"--out {second} is the input {second}" in capsys.readouterr().err
    assert load_checkpoint(second)["optimizer"] is not None  # the input is untouched


@needs_data
def test_keep_last_writes_numbered_checkpoints_and_keeps_only_the_newest(tmp_path, capsys):
    out = tmp_path / "run.pt"
    # 40 pairs in batches of 400 tokens: a few updates per epoch, one numbered checkpoint per epoch.
    assert main(["--data-dir", DATA_DIR, "--limit", "40", "--device", "cpu", "--no-progress", "--beam-size", "0",
                 "--preset", "tiny", "--epochs", "4", "--keep-last", "2", "--out", str(out)]) == 0
    kept = sorted(tmp_path.glob("run-step*.pt"))
    steps = [load_checkpoint(path)["step"] for path in kept]
    assert len(kept) == 2 and steps == sorted(steps) and steps[-1] == load_checkpoint(out)["step"]
    assert [path.name for path in kept] == [f"run-step{step:06d}.pt" for step in steps]
    assert steps[0] < steps[1]  # two distinct epochs, the last two of four
