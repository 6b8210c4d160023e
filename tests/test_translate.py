"""``annotated.load_pretrained``, the shipped format and ``python -m annotated.translate``."""

import subprocess
import sys

import pytest
import torch

from annotated.support.checkpoint import CheckpointError
from annotated.support.cli import main as train
from annotated.support.course import ROOT
from annotated.support.pretrained import export, load_pretrained
from annotated.translate import MAX_SOURCE_TOKENS, main, translate
from tests.test_cli import DATA_DIR, needs_data

pytestmark = pytest.mark.usefixtures("one_thread")

SENTENCES = ["Zwei Hunde spielen im Schnee.", "Ein Mann fährt Fahrrad."]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny byte-pair model and a tiny whole-word model, a few updates each, and the first exported."""
    folder = tmp_path_factory.mktemp("models")
    common = ["--data-dir", DATA_DIR, "--limit", "120", "--device", "cpu", "--no-progress", "--beam-size", "0",
              "--preset", "tiny", "--max-steps", "2"]
    assert train([*common, "--out", str(folder / "bpe.pt")]) == 0
    assert train([*common, "--bpe-merges", "0", "--out", str(folder / "words.pt")]) == 0
    export(folder / "bpe.pt", folder / "shipped")
    return folder


@needs_data
def test_the_exported_model_translates_as_its_checkpoint_up_to_float16(trained):
    model, tokenizer = load_pretrained(trained / "bpe.pt")
    shipped, shipped_tokenizer = load_pretrained(trained / "shipped")
    assert shipped_tokenizer.merges == tokenizer.merges
    assert shipped_tokenizer.src_vocab.get_itos() == tokenizer.src_vocab.get_itos()
    for (name, weight), (shipped_name, shipped_weight) in zip(model.state_dict().items(),
                                                              shipped.state_dict().items()):
        assert name == shipped_name and shipped_weight.dtype == torch.float32
        torch.testing.assert_close(shipped_weight, weight.half().float())  # exactly the float16 rounding
    # The three tied matrices stay one after loading (§3.4).
    assert shipped.src_embed[0].lut.weight is shipped.tgt_embed[0].lut.weight is shipped.generator.proj.weight
    assert not shipped.training


@needs_data
def test_a_damaged_or_missing_shipped_file_is_named(trained, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(trained / "shipped", copy)
    weights = bytearray((copy / "model.safetensors").read_bytes())
    weights[-10] ^= 1
    (copy / "model.safetensors").write_bytes(bytes(weights))
    with pytest.raises(CheckpointError, match="model.safetensors does not match its checksum"):
        load_pretrained(copy)
    (copy / "vocab.txt").unlink()
    with pytest.raises(CheckpointError, match="lacks vocab.txt"):
        load_pretrained(copy)
    with pytest.raises(CheckpointError, match="no model at"):
        load_pretrained(tmp_path / "nothing")


@needs_data
def test_export_refuses_a_whole_word_model(trained, tmp_path):
    with pytest.raises(CheckpointError, match="whole-word model"):
        export(trained / "words.pt", tmp_path / "out")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@needs_data
@pytest.mark.parametrize("name", ["bpe.pt", "words.pt", "shipped"])
def test_translate_keeps_order_and_gives_empty_lines_for_empty_input(trained, name):
    model, tokenizer = load_pretrained(trained / name)
    together = translate([SENTENCES[0], "", "   ", SENTENCES[1]], model, tokenizer, beam=2)
    alone = [translate([s], model, tokenizer, beam=2)[0] for s in SENTENCES]
    assert together[1:3] == ["", ""]
    assert [together[0], together[3]] == alone  # batching does not change a translation


@needs_data
def test_a_line_too_long_is_a_clear_error(trained):
    model, tokenizer = load_pretrained(trained / "bpe.pt")
    with pytest.raises(ValueError, match=f"sentence 2 has .* tokens, more than the {MAX_SOURCE_TOKENS}"):
        translate(["Hallo.", "Hund " * (MAX_SOURCE_TOKENS + 1)], model, tokenizer)


def run(*args, stdin=""):
    return subprocess.run([sys.executable, "-m", "annotated.translate", *args], input=stdin, capture_output=True,
                          text=True, cwd=ROOT, timeout=300)


@needs_data
def test_the_command_reads_stdin_line_by_line_and_explains_the_lines_it_cannot_translate(trained):
    long_line = "Hund " * (MAX_SOURCE_TOKENS + 1)
    stdin = f"{SENTENCES[0]}\n\n{long_line}\n日本語のテキスト\n{SENTENCES[1]}\n"
    result = run("--checkpoint", str(trained / "shipped"), "--beam", "2", stdin=stdin)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split("\n")
    assert len(lines) == 6 and lines[-1] == ""  # one line out per line in, in order
    assert lines[1] == "" and lines[2] == ""
    assert f"line 3: {MAX_SOURCE_TOKENS + 1} tokens" in result.stderr and "Traceback" not in result.stderr
    model, tokenizer = load_pretrained(trained / "shipped")
    assert [lines[0], lines[4]] == translate(SENTENCES, model, tokenizer, beam=2)


@needs_data
def test_the_command_translates_its_arguments(trained):
    result = run("--checkpoint", str(trained / "bpe.pt"), "--beam", "1", *SENTENCES)
    assert result.returncode == 0, result.stderr
    model, tokenizer = load_pretrained(trained / "bpe.pt")
    assert result.stdout.split("\n")[:2] == translate(SENTENCES, model, tokenizer, beam=1)


@pytest.mark.parametrize("args, message", [
    (["--beam", "0", "x"], "--beam: '0' is not a positive integer"),
    (["--alpha", "-1", "x"], "--alpha: '-1' is not a number >= 0"),
    (["--checkpoint", "missing.pt", "x"], "no model at missing.pt"),
])
def test_bad_arguments_get_one_line_and_no_traceback(args, message):
    result = run(*args)
    assert result.returncode in (1, 2) and message in result.stderr and "Traceback" not in result.stderr

