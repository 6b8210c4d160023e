"""``annotated.load_pretrained``, the shipped format and ``python -m annotated.translate``."""

import shlex
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
    (["--checkpoint", "", "x"], "argument --checkpoint: an empty path; give a .pt checkpoint"),
])
def test_bad_arguments_get_one_line_and_no_traceback(args, message):
    result = run(*args)
    assert result.returncode in (1, 2) and message in result.stderr and "Traceback" not in result.stderr



# ---------------------------------------------------------------- input checked before it reaches the model


class FakeStdin:
    """stdin as a pipe gives it: bytes under .buffer, no terminal."""

    def __init__(self, data: bytes):
        import io

        self.buffer = io.BytesIO(data)

    def isatty(self) -> bool:
        return False


@pytest.fixture
def command(monkeypatch, capsys, tiny_bpe_checkpoint):
    """``command(*argv, stdin=b"...")`` runs the translate command in this process on the tiny model;
    returns (exit code, stdout lines, stderr)."""
    def run_here(*argv, stdin: bytes = b""):
        monkeypatch.setattr(sys, "stdin", FakeStdin(stdin))
        try:
            code = main(["--checkpoint", str(tiny_bpe_checkpoint), "--beam", "2", *argv])
        except SystemExit as exit_:
            code = exit_.code
        out, err = capsys.readouterr()
        return code, out.split("\n")[:-1], err
    return run_here


@pytest.fixture(scope="module")
def tiny(tiny_bpe_checkpoint):
    return load_pretrained(tiny_bpe_checkpoint)


def test_utf16_from_powershell_is_converted_with_a_note(command):
    code, expected, _ = command(stdin="Ein Mann.\nZwei Hunde.\n".encode("utf-8"))
    for encoding in ("utf-16", "utf-32", "utf-8-sig"):  # each with its byte-order mark
        code, lines, err = command(stdin="Ein Mann.\r\nZwei Hunde.\r\n".encode(encoding))
        assert code == 0 and lines == expected, encoding  # two lines in, the same two out
        assert ("is UTF-" in err) == (encoding != "utf-8-sig"), err


@pytest.mark.parametrize("data, message", [
    ("Für dich.\n".encode("latin-1"), "stdin is not UTF-8: line 1, byte 2 is the byte 0xFC"),
    ("Ein Mann.\n".encode("utf-16-le"), "stdin holds NUL bytes (line 1, byte 2): it is not UTF-8 text, probably "
                                        "UTF-16LE without a byte-order mark"),
])
def test_text_that_is_not_utf8_is_refused_with_the_fix_before_the_model_loads(command, data, message, monkeypatch):
    import annotated.translate as translate_module

    monkeypatch.setattr(translate_module, "load_pretrained", lambda *a: pytest.fail("the model was loaded"))
    code, lines, err = command(stdin=data)
    assert code == 1 and lines == [] and message in err and "--encoding" in err and err.count("\n") == 1


def test_encoding_reads_latin1_as_it_should(command):
    assert command("--encoding", "latin-1", stdin="Für dich.\n".encode("latin-1"))[1] == \
        command(stdin="Für dich.\n".encode("utf-8"))[1]


def test_an_argument_in_latin1_is_refused(command):
    # Python hands an argument's bytes that are not UTF-8 over as lone surrogates (surrogateescape).
    code, lines, err = command(b"F\xfcr dich.".decode("utf-8", "surrogateescape"))
    assert code == 1 and lines == [] and "argument 1 is not UTF-8: character 2 was the byte 0xFC" in err


def test_control_and_invisible_characters_are_removed_and_a_line_without_letters_gives_a_warning(command):
    code, clean, _ = command(stdin="Ein Mann läuft.\n".encode())
    stdin = "Ein \0Mann\a läuft\x1b.\n\u200b\n123 --- !\nEin\u00a0Mann la\u0308uft.\n"
    code, lines, err = command(stdin=stdin.encode())
    assert code == 0 and len(lines) == 4
    assert lines[0] == lines[3] == clean[0]  # the same sentence once cleaned (and its umlaut composed)
    assert lines[1] == lines[2] == ""
    assert "line 1: removed 3 control or invisible character(s) (U+0000 NUL, U+0007 BEL, U+001B ESC)" in err
    assert "line 2: removed 1 control or invisible character(s) (U+200B ZERO WIDTH SPACE)" in err
    assert "line 3 has no letter to translate ('123 --- !')" in err


@pytest.mark.parametrize("args, message", [
    (["--beam", "101"], "argument --beam: '101' is more than 100"),
    (["--beam", "100000"], "argument --beam: '100000' is more than 100"),
    (["--alpha", "200"], "argument --alpha: '200' is more than 10"),
    (["--alpha", "1e308"], "argument --alpha: '1e308' is more than 10"),
    (["--threads", "100000"], "argument --threads: '100000' is more than"),
    (["--encoding", "klingon"], "argument --encoding: 'klingon' is not an encoding"),
])
def test_options_out_of_range_are_usage_errors_before_any_work(command, args, message, monkeypatch):
    import annotated.translate as translate_module

    monkeypatch.setattr(translate_module, "load_pretrained", lambda *a: pytest.fail("the model was loaded"))
    code, lines, err = command(*args, "Ein Mann.")
    assert code == 2 and message in err and lines == []


def test_a_beam_wider_than_the_vocabulary_is_a_usage_error(command, tiny):
    _, tokenizer = tiny
    code, lines, err = command("--beam", str(len(tokenizer.tgt_vocab) + 1), "Ein Mann.")
    assert code == 2 and f"wider than the model's target vocabulary of {len(tokenizer.tgt_vocab)} tokens" in err


def test_a_text_file_given_as_the_checkpoint_is_called_a_text_file(command, tmp_path):
    (tmp_path / "notes.pt").write_text("these are my notes\n")
    code, _, err = command("--checkpoint", str(tmp_path / "notes.pt"), "Ein Mann.")
    assert code == 1 and "notes.pt is a text file ('these are my notes'...), not a checkpoint" in err
    assert "could run code" not in err


def test_translate_refuses_a_single_string_and_bytes(tiny):
    model, tokenizer = tiny
    with pytest.raises(TypeError, match=r"sentences must be a list of German sentences, got a single string"):
        translate("Ein Mann.", model, tokenizer)
    with pytest.raises(TypeError, match="sentence 1 is a bytes, not a str"):
        translate([b"Ein Mann."], model, tokenizer)


def test_translate_warns_about_what_it_removes_and_gives_no_caption_for_no_letters(tiny):
    model, tokenizer = tiny
    with pytest.warns(UserWarning) as caught:
        assert translate(["\u200b", "123 ---", "Ein Mann."], model, tokenizer, beam=2)[:2] == ["", ""]
    assert [str(w.message) for w in caught] == [
        "sentence 1: removed 1 control or invisible character(s) (U+200B ZERO WIDTH SPACE)",
        "sentence 2 has no letter to translate ('123 ---'); the model translates German sentences, so an empty "
        "line stands for it"]
    with pytest.warns(UserWarning, match=r"sentence 1 is written in the Cyrillic script, which the model does not "
                                         r"know \('Привет'\); the model translates German sentences"):
        assert translate(["Привет"], model, tokenizer, beam=2) == [""]


def test_a_model_with_nan_weights_is_an_error_not_padding(tiny):
    import copy

    model, tokenizer = tiny
    broken = copy.deepcopy(model)
    name, weight = list(broken.named_parameters())[5]
    with torch.no_grad():
        weight.view(-1)[0] = float("nan")
    for beam in (1, 2):  # greedy decoding too, which goes through no beam-search guard
        with pytest.raises(ValueError, match=f"the model's weights {name} hold NaN or infinite values"):
            translate(["Ein Mann."], broken, tokenizer, beam=beam)


# ---------------------------------------------------------------- a model and its own tokenizer, and the arguments


@pytest.fixture
def no_shipped_model(monkeypatch):
    """translate() must not fall back on the shipped model for these calls."""
    import annotated.translate as translate_module

    monkeypatch.setattr(translate_module, "load_pretrained", lambda *a, **k: pytest.fail("the shipped model was loaded"))


def test_a_model_without_its_tokenizer_is_an_error_not_the_shipped_model(tiny, no_shipped_model):
    model, tokenizer = tiny
    with pytest.raises(TypeError, match=r"^translate\(\) got a model but no tokenizer, and would have used the "
                                        r"shipped model instead of yours; pass the tokenizer loaded with it: model, "
                                        r"tokenizer = load_pretrained\(path\); translate\(sentences, model, "
                                        r"tokenizer\)$"):
        translate(["Ein Mann."], model)
    with pytest.raises(TypeError, match=r"^translate\(\) got a tokenizer but no model"):
        translate(["Ein Mann."], tokenizer=tokenizer)
    with pytest.raises(TypeError, match=r"^model is a tuple, what load_pretrained\(\) returns; unpack it"):
        translate(["Ein Mann."], tiny)
    with pytest.raises(TypeError, match=r"^model and tokenizer are swapped"):
        translate(["Ein Mann."], tokenizer, model)
    with pytest.raises(TypeError, match=r"^model must be a Transformer of this course .* got a str"):
        translate(["Ein Mann."], "model.pt", tokenizer)
    with pytest.raises(TypeError, match=r"^tokenizer must be the Tokenizer of the model .* got a dict"):
        translate(["Ein Mann."], model, {"vocab": 1})


def test_a_tokenizer_of_another_model_is_refused(tiny, no_shipped_model):
    from annotated.support.tokenizer import Tokenizer
    from annotated.vocab import Vocab

    model, tokenizer = tiny
    smaller = Vocab(tokenizer.src_vocab.get_itos()[:-2])
    with pytest.raises(ValueError, match=rf"^the tokenizer's vocabularies \({len(smaller)} source and {len(smaller)} "
                                         rf"target tokens\) do not fit the model, built for {len(tokenizer.src_vocab)} "
                                         rf"and {len(tokenizer.tgt_vocab)}: the tokenizer belongs to another model"):
        translate(["Ein Mann."], model, Tokenizer(smaller, smaller, tokenizer.merges))


@pytest.mark.parametrize("kwargs, error, message", [
    ({"beam": 0}, ValueError, r"^beam must be a positive integer, got 0; beam=1 is greedy decoding"),
    ({"beam": 2.5}, ValueError, r"^beam must be a positive integer, got 2.5"),
    ({"beam": True}, ValueError, r"^beam must be a positive integer, got True"),
    ({"alpha": -1}, ValueError, r"^alpha \(the length penalty\) must be a number from 0 to 10, got -1"),
    ({"alpha": float("nan")}, ValueError, r"^alpha \(the length penalty\) must be a number from 0 to 10, got nan"),
    ({"alpha": "0.6"}, ValueError, r"^alpha \(the length penalty\) must be a number from 0 to 10, got '0.6'"),
    ({"batch_size": 0}, ValueError, r"^batch_size must be a positive integer, got 0"),
    ({"sentences": 5}, TypeError, r"^sentences must be a list of German sentences, got a int"),
    ({"sentences": [None]}, TypeError, r"^sentence 1 is a NoneType, not a str; give each sentence as a str"),
])
def test_each_argument_out_of_range_is_named_before_any_work(tiny, no_shipped_model, kwargs, error, message):
    model, tokenizer = tiny
    arguments = {"sentences": ["Ein Mann."], "model": model, "tokenizer": tokenizer, **kwargs}
    with pytest.raises(error, match=message):
        translate(**arguments)


def test_an_iterator_of_sentences_is_read_once(tiny):
    model, tokenizer = tiny
    assert translate(iter(["Ein Mann.", "Zwei Hunde."]), model, tokenizer, beam=2) == \
        translate(["Ein Mann.", "Zwei Hunde."], model, tokenizer, beam=2)


# ---------------------------------------------------------------- the command with closed streams and pipes


def run_tiny(checkpoint, *args, shell_suffix="", popen=False):
    """The command on the tiny model in a fresh Python, with a redirection of the shell (``<&-``)."""
    command = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "annotated.translate", "--checkpoint",
                                                  str(checkpoint), "--beam", "2", *args])
    return subprocess.run(["bash", "-c", f"{command} {shell_suffix}"], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)


def test_with_stdin_closed_and_no_arguments_the_command_says_so(tiny_bpe_checkpoint):
    result = run_tiny(tiny_bpe_checkpoint, shell_suffix="<&-")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == ("python -m annotated.translate: error: stdin is closed and no sentences were given; give "
                             "them as arguments, or from a file: python -m annotated.translate < german.txt\n")


def test_with_stdout_closed_the_command_says_the_translations_would_be_lost(tiny_bpe_checkpoint):
    result = run_tiny(tiny_bpe_checkpoint, "Ein Mann.", shell_suffix=">&-")
    assert result.returncode == 2 and "error: stdout is closed, so the translations would be lost" in result.stderr
    assert "Traceback" not in result.stderr


def test_output_into_a_pipe_that_closes_early_ends_quietly_like_other_unix_tools(tiny_bpe_checkpoint):
    """`translate < german.txt | head -1`: head leaves after one line, and the command's next write
    gets EPIPE. Here the reading end is closed before the command writes, so that every write fails."""
    process = subprocess.Popen([sys.executable, "-m", "annotated.translate", "--checkpoint", str(tiny_bpe_checkpoint),
                                "--beam", "1", "Ein Mann.", "Zwei Hunde."], stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    process.stdout.close()
    err = process.stderr.read().decode()
    assert process.wait(timeout=300) == 141  # 128 + SIGPIPE, what a shell reports for `seq 1e6 | head -1`
    assert err == "", err  # no traceback, no "Exception ignored ... BrokenPipeError" at exit


def test_a_named_pipe_as_the_model_is_named_without_waiting_for_a_writer(tmp_path):
    import os

    os.mkfifo(tmp_path / "model.pt")
    result = run("--checkpoint", str(tmp_path / "model.pt"), "Ein Mann.")
    assert result.returncode == 2 and "model.pt is a named pipe (FIFO), not a model; give a .pt checkpoint" in \
        result.stderr
    assert "--resume" not in result.stderr and "Traceback" not in result.stderr


def test_an_older_model_folder_is_one_note_line(tiny_bpe_checkpoint, tmp_path, command):
    import json

    from annotated.support.pretrained import FILES, TIES, sha256

    folder = export(tiny_bpe_checkpoint, tmp_path / "older")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({k: v for k, v in config.items() if k not in TIES}))
    (folder / "SHA256SUMS").write_text("".join(f"{sha256(folder / name)}  {name}\n" for name in FILES))
    code, lines, err = command("--checkpoint", str(folder), "Ein Mann.")
    assert code == 0 and len(lines) == 1
    assert err.startswith("python -m annotated.translate: note: ") and "records no SHA-256" in err
    assert err.count("\n") == 1 and "UserWarning" not in err
