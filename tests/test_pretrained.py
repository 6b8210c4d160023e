"""The model that ships with the package: its files, its size, and the BLEU the README states."""

import json
import re
import warnings

import pytest

from annotated import load_pretrained
from annotated.data import load_pairs
from annotated.evaluation import corpus_bleu
from annotated.support.course import ROOT
from annotated.support.pretrained import FILES, PRETRAINED_DIR
from annotated.translate import translate
from tests.test_data import needs_real_data

MAX_BYTES = 16_000_000  # what the package may carry for the model, all files together
STATED = re.compile(r"test BLEU of the shipped model: \*\*([0-9.]+)\*\*")


def stated_bleu(path) -> float:
    found = STATED.findall(path.read_text(encoding="utf-8"))
    assert len(found) == 1, f"{path.name} should state the shipped model's test BLEU once, as 'test BLEU of the " \
                            f"shipped model: **NN.NN**'"
    return float(found[0])


@pytest.fixture(scope="module")
def shipped():
    """The shipped model and its tokenizer, loaded once for the tests below."""
    return load_pretrained()


def test_the_shipped_files_are_all_there_and_small_enough_for_the_package():
    sizes = {name: (PRETRAINED_DIR / name).stat().st_size for name in (*FILES, "SHA256SUMS")}
    assert sum(sizes.values()) <= MAX_BYTES, sizes


def test_the_shipped_model_is_a_byte_pair_model_with_three_way_tying(shipped):
    model, tokenizer = shipped
    config = json.loads((PRETRAINED_DIR / "config.json").read_text())
    assert config["share_embeddings"] and tokenizer.shared
    assert model.src_embed[0].lut.weight is model.tgt_embed[0].lut.weight is model.generator.proj.weight
    assert tokenizer.src_vocab is tokenizer.tgt_vocab and len(tokenizer.src_vocab) == config["src_vocab_size"]
    assert len(tokenizer.merges) == 8000


def test_the_readme_and_the_results_state_the_same_bleu():
    assert stated_bleu(ROOT / "README.md") == stated_bleu(ROOT / "benchmarks" / "RESULTS.md") >= 38.0


@needs_real_data
def test_the_shipped_model_translates_the_test_set_at_the_stated_bleu_with_no_unk(shipped):
    model, tokenizer = shipped
    pairs = load_pairs("test_2016_flickr")
    translations = translate([de for de, _ in pairs], model, tokenizer, beam=4, alpha=0.6)
    assert not [t for t in translations if "<unk>" in t]
    bleu = corpus_bleu(translations, [en for _, en in pairs])
    assert bleu.signature == "nrefs:1|case:lc|eff:no|tok:13a|smooth:exp|version:2.6.0"
    assert abs(bleu.score - stated_bleu(ROOT / "README.md")) <= 0.3, bleu.score


def test_the_readmes_examples_are_what_the_shipped_model_writes(shipped):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    examples = {"Zwei Hunde spielen im Schnee.": "two dogs play in the snow.",
                "Ein Mann fährt Fahrrad.": "a man rides a bicycle.",
                "The cat is on the mat.": "a crowd of people at a meeting."}
    for german, english in examples.items():
        assert german in readme and english in readme, (german, english)
    model, tokenizer = shipped
    assert translate(list(examples), model, tokenizer) == list(examples.values())


# ---------------------------------------------------------------- export: nothing replaced by mistake


def export_main(*argv):
    from annotated.support.pretrained import main

    try:
        return main(["export", *map(str, argv)])
    except SystemExit as exit_:
        return exit_.code


def shipped_state():
    return {name: (PRETRAINED_DIR / name).stat().st_mtime_ns for name in (*FILES, "SHA256SUMS")}


def test_export_without_out_or_onto_the_shipped_model_without_force_is_refused(tiny_bpe_checkpoint, capsys):
    before = shipped_state()
    assert export_main(tiny_bpe_checkpoint) == 2
    assert "give --out FOLDER" in capsys.readouterr().err
    assert export_main(tiny_bpe_checkpoint, "--out", PRETRAINED_DIR) == 2
    err = capsys.readouterr().err
    assert "holds the model shipped with the course" in err and "--force" in err
    assert shipped_state() == before and not (PRETRAINED_DIR / ".built-by-annotated").exists()


def test_export_onto_the_shipped_folder_happens_only_with_force(tiny_bpe_checkpoint, tmp_path, monkeypatch):
    import shutil

    import annotated.support.pretrained as pretrained

    fake = tmp_path / "pretrained"  # stands for annotated/pretrained: the real one is never touched by a test
    shutil.copytree(PRETRAINED_DIR, fake)
    monkeypatch.setattr(pretrained, "PRETRAINED_DIR", fake.resolve())
    (fake / ".built-by-annotated").write_text("even with a builder's marker, the shipped folder needs --force")
    assert export_main(tiny_bpe_checkpoint, "--out", fake) == 2
    assert (fake / "model.safetensors").read_bytes() == (PRETRAINED_DIR / "model.safetensors").read_bytes()
    assert export_main(tiny_bpe_checkpoint, "--out", fake, "--force") == 0
    assert sorted(p.name for p in fake.iterdir()) == sorted([*FILES, "SHA256SUMS"])  # no marker written there
    model, _ = load_pretrained(fake)
    assert model.src_embed[0].lut.weight.shape[1] == 8


def test_export_refuses_a_users_folder_and_one_holding_the_checkpoint(tiny_bpe_checkpoint, tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    assert export_main(tiny_bpe_checkpoint, "--out", mine) == 2
    assert "was not written by this command" in capsys.readouterr().err and (mine / "notes.txt").exists()
    assert export_main(tiny_bpe_checkpoint, "--out", tiny_bpe_checkpoint.parent, "--force") == 2
    assert "(the input)" in capsys.readouterr().err and tiny_bpe_checkpoint.is_file()
    assert export_main(tiny_bpe_checkpoint, "--out", tmp_path / "new") == 0
    assert export_main(tiny_bpe_checkpoint, "--out", tmp_path / "new") == 0  # its own folder: replaced


def test_an_interrupted_export_keeps_the_earlier_one(tiny_bpe_checkpoint, tmp_path, monkeypatch):
    import annotated.support.pretrained as pretrained

    out = tmp_path / "model"
    pretrained.export(tiny_bpe_checkpoint, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def ctrl_c(path):
        raise KeyboardInterrupt

    monkeypatch.setattr(pretrained, "sha256", ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        pretrained.export(tiny_bpe_checkpoint, out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


# ---------------------------------------------------------------- a folder whose parts disagree


@pytest.fixture
def exported(tiny_bpe_checkpoint, tmp_path):
    from annotated.support.pretrained import export

    return export(tiny_bpe_checkpoint, tmp_path / "model")


def resum(folder):
    """SHA256SUMS written again, as someone who edited a file would: the checksums then hold."""
    from annotated.support.pretrained import sha256

    (folder / "SHA256SUMS").write_text("".join(f"{sha256(folder / name)}  {name}\n" for name in FILES))


def edit_config(folder, **changes):
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))
    resum(folder)


@pytest.mark.parametrize("change, message", [
    ({"d_model": 16}, r"model.safetensors does not fit config.json; shapes that differ: .*\(the configuration needs"),
    ({"h": 7}, r"config.json: TransformerConfig: d_model=8 is not divisible by h=7"),
    ({"heads": 2}, r"config.json: unknown configuration field\(s\) 'heads'; TransformerConfig has"),
    ({"src_vocab_size": 7, "tgt_vocab_size": 7}, r"vocab.txt: the src vocabulary has \d+ entries but the "
                                                 r"configuration and the weights are for 7"),
    ({"dropout": "0.1"}, r"config.json: TransformerConfig.dropout must be a probability"),
])
def test_a_config_that_disagrees_with_the_other_files_is_named_even_with_recomputed_checksums(exported, change,
                                                                                            message):
    from annotated.support.checkpoint import CheckpointError

    edit_config(exported, **change)
    with pytest.raises(CheckpointError, match=message):
        load_pretrained(exported)


def test_a_config_that_is_not_json_is_named_with_its_line(exported):
    from annotated.support.checkpoint import CheckpointError

    (exported / "config.json").write_text('{"src_vocab_size": 14,\n "N": }')
    resum(exported)
    with pytest.raises(CheckpointError, match=r"config.json is not valid JSON \(line 2, column 7: Expecting value\)"):
        load_pretrained(exported)


def without_ties(folder):
    """config.json as export wrote it before it recorded what ties the files together (an older folder)."""
    from annotated.support.pretrained import TIES

    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({k: v for k, v in config.items() if k not in TIES}))
    resum(folder)


@pytest.mark.parametrize("older", [False, True], ids=["recorded", "older folder"])
def test_a_vocabulary_cut_short_is_named_not_an_index_error_on_rare_words(exported, older):
    from annotated.support.checkpoint import CheckpointError

    if older:  # no hash to compare: the sizes and the special tokens still catch it
        without_ties(exported)
    named = r"vocab.txt is not the vocabulary this model was trained with" if not older else None
    lines = (exported / "vocab.txt").read_text().splitlines()
    (exported / "vocab.txt").write_text("\n".join(lines[:-3]) + "\n")
    resum(exported)
    with pytest.raises(CheckpointError, match=named or r"the src vocabulary has \d+ entries but .* cut short"), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        load_pretrained(exported)
    (exported / "vocab.txt").write_text("\n".join(lines[4:]) + "\n")  # without the special tokens
    resum(exported)
    with pytest.raises(CheckpointError, match=named or r"lacks the special token\(s\) <pad>"), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        load_pretrained(exported)


def test_weights_with_nan_are_refused_on_loading(exported):
    import torch
    from safetensors.torch import load_file, save_file

    from annotated.support.checkpoint import CheckpointError

    weights = load_file(exported / "model.safetensors")
    name = sorted(weights)[0]
    weights[name] = weights[name].clone()
    weights[name].view(-1)[0] = float("nan")
    save_file(weights, exported / "model.safetensors")
    resum(exported)
    with pytest.raises(CheckpointError, match=f"the weights {name} hold NaN or infinite values"):
        load_pretrained(exported)
    assert torch.isnan(weights[name]).any()


# ---------------------------------------------------------------- the parts of a folder tied to each other


def test_the_shipped_config_records_the_sha256_of_its_vocabulary_and_codes_and_the_weights_dtype():
    from annotated.support.pretrained import check_ties, sha256, stored_dtypes

    config = json.loads((PRETRAINED_DIR / "config.json").read_text())
    assert config["vocab_sha256"] == sha256(PRETRAINED_DIR / "vocab.txt")
    assert config["bpe_codes_sha256"] == sha256(PRETRAINED_DIR / "bpe_codes.txt")
    assert config["weights_dtype"] == "float16" == next(iter(set(stored_dtypes(PRETRAINED_DIR /
                                                                               "model.safetensors").values())))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_ties(PRETRAINED_DIR)


def test_export_records_what_ties_the_files_together(exported):
    from annotated.support.pretrained import sha256

    config = json.loads((exported / "config.json").read_text())
    assert (config["vocab_sha256"], config["bpe_codes_sha256"], config["weights_dtype"]) == (
        sha256(exported / "vocab.txt"), sha256(exported / "bpe_codes.txt"), "float16")


def another_models_vocabulary(folder):
    """The vocabulary of another model of the same size: the same pieces, two of them swapped, so
    every id still exists but two mean other words."""
    lines = (folder / "vocab.txt").read_text().splitlines()
    lines[-1], lines[-2] = lines[-2], lines[-1]
    (folder / "vocab.txt").write_text("\n".join(lines) + "\n")


def codes_cut_short(folder):
    lines = (folder / "bpe_codes.txt").read_text().splitlines()
    (folder / "bpe_codes.txt").write_text("\n".join(lines[:2]) + "\n")  # the header and 1 of 3 merges


def int8_weights(folder):
    from safetensors.torch import load_file, save_file

    weights = load_file(folder / "model.safetensors")
    save_file({name: (w * 100).round().clamp(-128, 127).to(torch_dtype("int8")) for name, w in weights.items()},
              folder / "model.safetensors")


def torch_dtype(name):
    import torch

    return getattr(torch, name)


@pytest.mark.parametrize("change, message", [
    (another_models_vocabulary, r"vocab.txt is not the vocabulary this model was trained with: its SHA-256 is "
                                r"[0-9a-f]{12}\.\.\., config.json records [0-9a-f]{12}\.\.\. \(vocab_sha256\)"),
    (codes_cut_short, r"bpe_codes.txt is not the byte-pair codes this model was trained with"),
    (int8_weights, r"model.safetensors stores \d+ tensor\(s\) as int8 \(e.g. .*\), but config.json records "
                   r"weights_dtype float16"),
])
def test_a_part_of_another_model_is_refused_even_with_checksums_computed_again(exported, change, message):
    """Each of these loaded without a word, and translated nonsense, before config.json tied the files."""
    from annotated.support.checkpoint import CheckpointError

    change(exported)
    resum(exported)
    with pytest.raises(CheckpointError, match=message):
        load_pretrained(exported)


def test_an_older_folder_without_the_ties_loads_with_a_warning_naming_the_fix(exported):
    from annotated.support.checkpoint import CheckpointError

    without_ties(exported)
    with pytest.warns(UserWarning, match=r"config.json records no SHA-256 of vocab.txt and bpe_codes.txt and no "
                                         r"weights_dtype .* export it again from its checkpoint to record them: "
                                         r"python -m annotated.support.pretrained export CHECKPOINT --out"):
        model, _ = load_pretrained(exported)
    assert not model.training
    int8_weights(exported)  # whatever the folder's age, integer weights are never a model's
    resum(exported)
    with pytest.raises(CheckpointError, match=r"stores \d+ tensor\(s\) as int8 .*not as floating-point numbers"), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        load_pretrained(exported)


@pytest.mark.parametrize("change, message", [
    ({"weights_dtype": None}, r"config.json records vocab_sha256, bpe_codes_sha256 but not weights_dtype: the file "
                              r"was edited"),
    ({"vocab_sha256": "abc"}, r"config.json: vocab_sha256 must be the 64 hexadecimal digits of a SHA-256, got 'abc'"),
    ({"weights_dtype": "int8"}, r"config.json: weights_dtype must be one of float16, bfloat16, float32, got 'int8'"),
])
def test_ties_that_are_cut_or_unusable_are_named(exported, change, message):
    from annotated.support.checkpoint import CheckpointError

    config = json.loads((exported / "config.json").read_text())
    config.update(change)
    (exported / "config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    resum(exported)
    with pytest.raises(CheckpointError, match=message):
        load_pretrained(exported)


# ---------------------------------------------------------------- arguments of load_pretrained and export


def test_a_gpu_this_pytorch_cannot_use_is_one_line_before_any_loading(monkeypatch):
    import torch

    from annotated.support.errors import UsageError

    monkeypatch.setattr("annotated.support.pretrained.load_folder", lambda *a: pytest.fail("the model was loaded"))
    monkeypatch.setattr(torch.version, "cuda", None)  # a CPU-only build of PyTorch
    with pytest.raises(UsageError, match=r"^device='cuda', but this PyTorch .* is a CPU-only build; use "
                                         r"device='cpu', or install a CUDA build"):
        load_pretrained(device="cuda")
    monkeypatch.setattr(torch.version, "cuda", "12.1")  # a CUDA build on a machine without a usable GPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UsageError, match=r"^device='cuda:1', but PyTorch finds no usable NVIDIA GPU"):
        load_pretrained(device="cuda:1")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(UsageError, match=r"^device='mps' needs Apple's GPU .*; use device='cpu'"):
        load_pretrained(device="mps")
    with pytest.raises(UsageError, match=r"^device='gpu' is not a device PyTorch knows; use 'cpu', 'cuda'"):
        load_pretrained(device="gpu")
    with pytest.raises(UsageError, match=r"^device='meta' holds no weights"):
        load_pretrained(device="meta")
    with pytest.raises(TypeError, match=r"^device must be a str such as 'cpu' or 'cuda', or a torch.device, got a "
                                        r"int"):
        load_pretrained(device=0)
    with pytest.raises(TypeError, match=r"^path must be a model folder or a .pt checkpoint \(a str or Path\), got "
                                        r"a int"):
        load_pretrained(3)


def test_a_gpu_index_beyond_the_machines_is_named(monkeypatch):
    import torch

    from annotated.support.errors import UsageError

    monkeypatch.setattr(torch.version, "cuda", "12.1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(UsageError, match=r"^device='cuda:2', but this machine has 2 GPU\(s\): cuda:0 to cuda:1"):
        load_pretrained(device="cuda:2")


def test_a_named_pipe_is_never_opened_as_a_model(tmp_path):
    import os

    from annotated.support.checkpoint import CheckpointError

    fifo = tmp_path / "model.pt"
    os.mkfifo(fifo)  # reading it would wait for a writer, forever
    with pytest.raises(CheckpointError, match=r"model.pt is a named pipe \(FIFO\), not a model; give a .pt "
                                              r"checkpoint"):
        load_pretrained(fifo)


def test_export_of_a_model_folder_or_a_pipe_names_what_it_was_given(tmp_path, capsys):
    import os

    before = shipped_state()
    assert export_main(PRETRAINED_DIR, "--out", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert "is a model folder in the shipped format (the model shipped with the course), which export writes, " \
           "not a checkpoint it reads; give the .pt checkpoint written by python -m annotated.train" in err
    assert "--resume" not in err and err.count("\n") == 1 and shipped_state() == before
    os.mkfifo(tmp_path / "pipe.pt")
    assert export_main(tmp_path / "pipe.pt", "--out", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert "pipe.pt is a named pipe (FIFO), not a checkpoint" in err and "--resume" not in err
    assert not (tmp_path / "out").exists()
