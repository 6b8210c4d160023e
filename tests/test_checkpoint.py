"""Checkpoints: atomic writes, weights_only loading, clear mismatch errors, exact resumption."""

import argparse
import dataclasses
import errno
import io
import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from annotated.batching import collate
from annotated.label_smoothing import LabelSmoothingLoss
from annotated.model import TransformerConfig, make_model
from annotated.schedule import make_optimizer
from annotated.support.checkpoint import (CheckpointError, CheckpointMismatchError, OutputTakenError,
                                          average_checkpoints, check_output_path, file_identity, load_checkpoint,
                                          model_from_checkpoint, restore, save_checkpoint, vocabs_from_checkpoint)
from annotated.synthetic import reverse_task
from annotated.training import train_epoch
from annotated.vocab import SPECIALS, Vocab, build_vocab_from_iterator

VOCAB, PAD = 12, 0
CONFIG = TransformerConfig(VOCAB, VOCAB, N=1, d_model=16, d_ff=32, h=2, dropout=0.1)


pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py


def new_model(config: TransformerConfig = CONFIG, seed: int = 0):
    _ = torch.manual_seed(seed)
    return make_model(config)


def batches(n: int = 4):
    pairs = reverse_task(4 * n, length=5, vocab_size=VOCAB, seed=0)
    return [collate(pairs[4 * i : 4 * i + 4], PAD) for i in range(n)]


def vocab() -> Vocab:
    v = build_vocab_from_iterator([["ein", "hund", "ein"], ["katze"]])
    v.set_default_index(v["<unk>"])
    return v


def test_checkpoint_round_trips_weights_config_vocabularies_and_step(tmp_path):
    model = new_model()
    path = save_checkpoint(tmp_path / "model.pt", model, CONFIG, vocabs={"src": vocab(), "tgt": vocab()},
                           step=12, epoch=3, extra={"history": [1.5, 1.2]})
    raw = torch.load(path, weights_only=True)  # plain data only: no code runs on load
    assert raw["config"] == dataclasses.asdict(CONFIG)
    assert raw["vocabs"]["src"] == vocab().state_dict()
    checkpoint = load_checkpoint(path)
    assert (checkpoint["step"], checkpoint["epoch"], checkpoint["extra"]) == (12, 3, {"history": [1.5, 1.2]})
    rebuilt = model_from_checkpoint(checkpoint)
    assert_close(rebuilt.state_dict(), model.state_dict(), rtol=0, atol=0)
    # The tied embedding and generator are still one tensor after loading.
    assert rebuilt.generator.proj.weight is rebuilt.tgt_embed[0].lut.weight
    src = vocabs_from_checkpoint(checkpoint)["src"]
    assert src.get_itos() == vocab().get_itos() and src["zebra"] == src["<unk>"]


def test_saving_leaves_no_temporary_file(tmp_path):
    save_checkpoint(tmp_path / "model.pt", new_model(), CONFIG)
    save_checkpoint(tmp_path / "model.pt", new_model(seed=1), CONFIG)  # overwrite
    assert [p.name for p in tmp_path.iterdir()] == ["model.pt"]


def test_a_crash_in_the_middle_of_a_save_leaves_the_previous_checkpoint_intact(tmp_path, monkeypatch):
    path = tmp_path / "model.pt"
    old = new_model(seed=0)
    save_checkpoint(path, old, CONFIG, step=1)
    real_save = torch.save

    def save_half_then_fail(obj, f, *args, **kwargs):
        buffer = io.BytesIO()
        real_save(obj, buffer, *args, **kwargs)
        f.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])  # half the bytes reach the disk...
        raise OSError(28, "No space left on device")  # ...then the disk is full

    monkeypatch.setattr(torch, "save", save_half_then_fail)
    with pytest.raises(OSError, match="No space left"):
        save_checkpoint(path, new_model(seed=1), CONFIG, step=2)
    monkeypatch.undo()
    # A value that could not be loaded back is refused before the file is touched.
    with pytest.raises(CheckpointError, match=r"checkpoint\['extra'\]\['callback'\] is a builtins.function"):
        save_checkpoint(path, new_model(seed=1), CONFIG, step=3, extra={"callback": lambda: None})
    assert [p.name for p in tmp_path.iterdir()] == ["model.pt"]
    checkpoint = load_checkpoint(path)
    assert checkpoint["step"] == 1
    assert_close(checkpoint["model"], old.state_dict(), rtol=0, atol=0)


def test_a_checkpoint_of_another_shape_gets_an_error_naming_the_weights_and_the_fix(tmp_path):
    path = save_checkpoint(tmp_path / "model.pt", new_model(), CONFIG)
    wider = new_model(dataclasses.replace(CONFIG, d_model=32))
    with pytest.raises(CheckpointMismatchError) as error:
        restore(load_checkpoint(path), wider)
    message = str(error.value)
    assert "encoder.layers.0.self_attn.W_Q.weight: (16, 16) in the checkpoint, (32, 32) in the model" in message
    assert "more)" in message  # a long list is cut short, with the count of the rest
    assert "model_from_checkpoint" in message and "'d_model': 16" in message
    other_vocab = new_model(dataclasses.replace(CONFIG, tgt_vocab_size=20))
    with pytest.raises(CheckpointMismatchError, match=r"tgt_embed\.0\.lut\.weight: \(12, 16\) in the checkpoint, "
                                                      r"\(20, 16\) in the model"):
        restore(load_checkpoint(path), other_vocab)
    deeper = new_model(dataclasses.replace(CONFIG, N=2))
    with pytest.raises(CheckpointMismatchError, match=r"missing weights: encoder\.layers\.1\."):
        restore(load_checkpoint(path), deeper)


def test_missing_damaged_or_unsafe_files_get_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="without --resume"):
        load_checkpoint(tmp_path / "nothing.pt")
    (tmp_path / "damaged.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="damaged"):
        load_checkpoint(tmp_path / "damaged.pt")
    # A pickle that would construct an arbitrary object is refused by weights_only=True.
    torch.save({"format_version": 1, "model": {}, "payload": io.StringIO("code")}, tmp_path / "unsafe.pt")
    with pytest.raises(ValueError, match="holds Python objects other than tensors") as error:
        load_checkpoint(tmp_path / "unsafe.pt")
    assert "weights_only=False" not in str(error.value)  # PyTorch's advice would run the file's code


@pytest.mark.parametrize("value, named", [
    (Path("runs/x.pt"), "pathlib"), (np.float64(0.5), "numpy.float64"), (np.int64(3), "numpy.int64"),
    (argparse.Namespace(lr=1.0), "argparse.Namespace"), ({"a": [1, {2}]}, "builtins.set"),
])
def test_a_value_that_could_not_be_loaded_back_is_refused_before_the_good_checkpoint_is_replaced(tmp_path, value,
                                                                                                  named):
    path = save_checkpoint(tmp_path / "model.pt", new_model(), CONFIG, step=1)
    with pytest.raises(CheckpointError, match=rf"checkpoint\['extra'\]\['bad'\].* is a {named}"):
        save_checkpoint(path, new_model(seed=1), CONFIG, step=2, extra={"bad": value})
    assert load_checkpoint(path)["step"] == 1  # the good checkpoint is still there, readable
    assert [p.name for p in tmp_path.iterdir()] == ["model.pt"]


def test_every_value_the_check_lets_through_loads_back(tmp_path):
    extra = {"s": "x", "i": 1, "f": 0.5, "b": True, "n": None, "l": [1, 2.0], "t": (1, "a"), 0: {"d": {}},
             "tensor": torch.arange(3)}
    path = save_checkpoint(tmp_path / "model.pt", new_model(), CONFIG, extra=extra)
    loaded = load_checkpoint(path)["extra"]
    assert loaded.keys() == extra.keys() and loaded["t"] == (1, "a") and torch.equal(loaded["tensor"], torch.arange(3))


def test_a_flipped_byte_in_a_weight_is_caught_on_load(tmp_path):
    model = new_model()
    path = save_checkpoint(tmp_path / "model.pt", model, CONFIG)
    data = bytearray(path.read_bytes())
    # A weight's bytes: find the float32 bytes of one embedding value in the file and change one of them.
    needle = model.state_dict()["src_embed.0.lut.weight"][3].numpy().tobytes()
    at = bytes(data).index(needle)
    data[at + 1] ^= 0x10
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="damaged: its contents no longer match the checksum"):
        load_checkpoint(path)


def test_a_temporary_file_left_by_a_killed_save_is_removed_by_the_next_save(tmp_path):
    dead = 2**22 + 12345  # above the largest pid Linux hands out (pid_max <= 2**22)
    stale = tmp_path / f".model.pt.{dead}.tmp"
    stale.write_bytes(b"half a checkpoint")
    os.utime(stale, (0, 0))  # written long ago
    other = tmp_path / ".other.pt.123.tmp"  # another file's temporary: not ours to remove
    other.write_bytes(b"x")
    save_checkpoint(tmp_path / "model.pt", new_model(), CONFIG)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.pt.123.tmp", "model.pt"]


def test_a_path_that_cannot_be_written_is_refused_before_anything_is_saved(tmp_path):
    with pytest.raises(CheckpointError, match="is a folder; name a file"):
        save_checkpoint(tmp_path, new_model(), CONFIG)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(CheckpointError, match="afile is a file, not a folder"):
        save_checkpoint(tmp_path / "afile" / "sub" / "model.pt", new_model(), CONFIG)
    assert check_output_path(tmp_path / "new" / "deeper" / "model.pt") == tmp_path / "new" / "deeper" / "model.pt"


def test_a_symbolic_link_or_a_pipe_is_never_written_through(tmp_path):
    precious = tmp_path / "precious.pt"
    precious.write_bytes(b"kept")
    (tmp_path / "link.pt").symlink_to(precious)
    with pytest.raises(CheckpointError, match="is a symbolic link to .*precious.pt, which a checkpoint is never"):
        save_checkpoint(tmp_path / "link.pt", new_model(), CONFIG)
    assert precious.read_bytes() == b"kept" and (tmp_path / "link.pt").is_symlink()
    os.mkfifo(tmp_path / "pipe.pt")
    with pytest.raises(CheckpointError, match=r"pipe.pt is a named pipe \(FIFO\), not a file a checkpoint can"):
        save_checkpoint(tmp_path / "pipe.pt", new_model(), CONFIG)


def test_an_exclusive_save_keeps_a_file_that_appeared_while_it_was_written(tmp_path, monkeypatch):
    path = tmp_path / "model.pt"
    real_save = torch.save

    def another_process_saves_first(obj, f, *args, **kwargs):
        path.write_bytes(b"another run's checkpoint")  # while ours is being written
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", another_process_saves_first)
    with pytest.raises(OutputTakenError) as taken:
        save_checkpoint(path, new_model(), CONFIG, may_replace=set())  # a new file: it must not exist
    assert taken.value.path == path and path.read_bytes() == b"another run's checkpoint"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"]  # no temporary file left
    monkeypatch.setattr(torch, "save", real_save)
    with pytest.raises(OutputTakenError):  # the file is there before the save: refused at once
        save_checkpoint(path, new_model(), CONFIG, may_replace=set())
    # Without may_replace a save replaces whatever is there, as before.
    save_checkpoint(path, new_model(), CONFIG, step=1)
    assert load_checkpoint(path)["step"] == 1


def test_a_save_replaces_only_the_file_it_was_told_it_may_replace(tmp_path):
    path = save_checkpoint(tmp_path / "model.pt", new_model(), CONFIG, step=1)
    seen = file_identity(path)
    save_checkpoint(path, new_model(), CONFIG, step=2, may_replace={seen})
    assert load_checkpoint(path)["step"] == 2
    with pytest.raises(OutputTakenError):  # step 2 is another file than the one seen
        save_checkpoint(path, new_model(), CONFIG, step=3, may_replace={seen})
    ours = file_identity(path)
    with path.open("ab") as f:  # changed in place, as an editor or another program might
        f.write(b"more")
    with pytest.raises(OutputTakenError):
        save_checkpoint(path, new_model(), CONFIG, step=3, may_replace={ours})


@pytest.mark.parametrize("code", [errno.EPERM, errno.EOPNOTSUPP])
def test_an_exclusive_save_works_on_a_file_system_without_hard_links(tmp_path, monkeypatch, code):
    def no_hard_links(src, dst, *args, **kwargs):
        raise OSError(code, os.strerror(code), str(src))

    monkeypatch.setattr(os, "link", no_hard_links)  # FAT, exFAT, some network shares
    path = save_checkpoint(tmp_path / "model.pt", new_model(), CONFIG, step=1, may_replace=set())
    assert load_checkpoint(path)["step"] == 1
    with pytest.raises(OutputTakenError):
        save_checkpoint(path, new_model(), CONFIG, step=2, may_replace=set())
    assert load_checkpoint(path)["step"] == 1 and sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"]


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_loading_a_folder_or_a_pipe_names_what_it_is(tmp_path, kind):
    path = tmp_path / "model.pt"
    path.mkdir() if kind == "folder" else os.mkfifo(path)
    what = "is a folder, not a checkpoint" if kind == "folder" else r"is a named pipe \(FIFO\), not a checkpoint file"
    with pytest.raises(CheckpointError, match=what):
        load_checkpoint(path)  # and no hang reading a pipe nobody writes


def test_averaging_refuses_checkpoints_of_different_runs_or_vocabularies(tmp_path):
    model = new_model()
    a = save_checkpoint(tmp_path / "a.pt", model, CONFIG, vocabs={"tgt": vocab()}, step=1, extra={"run_id": "r1"})
    b = save_checkpoint(tmp_path / "b.pt", model, CONFIG, vocabs={"tgt": vocab()}, step=2, extra={"run_id": "r2"})
    with pytest.raises(CheckpointError, match="comes from run r1 and .*b.pt from run r2"):
        average_checkpoints([a, b])
    reordered = Vocab([*SPECIALS, *reversed(vocab().get_itos()[len(SPECIALS):])])
    c = save_checkpoint(tmp_path / "c.pt", model, CONFIG, vocabs={"tgt": reordered}, step=3, extra={"run_id": "r1"})
    with pytest.raises(CheckpointError, match="hold different vocabularies"):
        average_checkpoints([a, c])


def train_steps(model, optimizer, scheduler, steps):
    train_epoch(model, steps, LabelSmoothingLoss(VOCAB, PAD), optimizer, scheduler, progress=False)


@pytest.mark.parametrize("restore_rng", [True, False])
def test_resuming_from_a_checkpoint_continues_exactly_like_an_uninterrupted_run(tmp_path, restore_rng):
    """4 updates straight == 2 updates, save, load into fresh objects, 2 updates: bit for bit,
    with dropout on, because the random state is saved too. Without it, dropout draws
    different masks after the resume and the runs part ways (the second case)."""
    data = batches(4)
    model = new_model()
    optimizer, scheduler = make_optimizer(model, CONFIG.d_model, warmup=4)
    _ = torch.manual_seed(123)
    train_steps(model, optimizer, scheduler, data)
    straight = model.state_dict()

    model = new_model()
    optimizer, scheduler = make_optimizer(model, CONFIG.d_model, warmup=4)
    _ = torch.manual_seed(123)
    train_steps(model, optimizer, scheduler, data[:2])
    path = save_checkpoint(tmp_path / "model.pt", model, CONFIG, optimizer=optimizer, scheduler=scheduler,
                           step=scheduler.last_epoch)
    _ = torch.manual_seed(999)  # whatever happens in between
    checkpoint = load_checkpoint(path)
    resumed = model_from_checkpoint(checkpoint)
    optimizer, scheduler = make_optimizer(resumed, CONFIG.d_model, warmup=4)
    restore(checkpoint, resumed, optimizer, scheduler, restore_rng=restore_rng)
    assert scheduler.last_epoch == checkpoint["step"] == 2
    train_steps(resumed, optimizer, scheduler, data[2:])
    if restore_rng:
        assert_close(resumed.state_dict(), straight, rtol=0, atol=0)
    else:
        with pytest.raises(AssertionError):
            assert_close(resumed.state_dict(), straight, rtol=0, atol=0)


def test_averaging_checkpoints_gives_the_mean_of_their_weights(tmp_path):
    paths = []
    for seed in range(3):
        _ = torch.manual_seed(seed)
        paths.append(save_checkpoint(tmp_path / f"{seed}.pt", make_model(CONFIG), CONFIG, step=seed))
    averaged = average_checkpoints(paths)
    weights = [load_checkpoint(p)["model"] for p in paths]
    name = "encoder.layers.0.self_attn.W_Q.weight"
    torch.testing.assert_close(averaged["model"][name], (weights[0][name] + weights[1][name] + weights[2][name]) / 3)
    assert averaged["step"] == 2 and averaged["optimizer"] is None
    model = model_from_checkpoint(averaged)  # the average loads into a model of the same config
    assert model.generator.proj.weight is model.tgt_embed[0].lut.weight


def test_averaging_checkpoints_of_different_models_is_refused(tmp_path):
    other = TransformerConfig(VOCAB, VOCAB, N=2, d_model=16, d_ff=32, h=2)
    first = save_checkpoint(tmp_path / "a.pt", make_model(CONFIG), CONFIG)
    second = save_checkpoint(tmp_path / "b.pt", make_model(other), other)
    with pytest.raises(CheckpointMismatchError, match="average only checkpoints of one training run"):
        average_checkpoints([first, second])


def test_averaging_refuses_to_count_one_checkpoint_twice(tmp_path):
    first = save_checkpoint(tmp_path / "a.pt", make_model(CONFIG), CONFIG, step=5)
    copy = save_checkpoint(tmp_path / "copy.pt", make_model(CONFIG), CONFIG, step=5)  # the same step saved again
    with pytest.raises(ValueError, match="appears twice"):
        average_checkpoints([first, first])
    with pytest.raises(ValueError, match=r"hold steps \[5, 5\]: two of them are copies of one state"):
        average_checkpoints([first, copy])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_checkpoint_loaded_onto_a_gpu_restores_the_random_state_and_verifies_its_checksum(tmp_path):
    # map_location moves every tensor, the random generators' byte states included; restoring
    # brings those back to the CPU (with map_location="cuda" it used to fail with a TypeError).
    model = new_model().cuda()
    optimizer, scheduler = make_optimizer(model, 16, 10)
    path = save_checkpoint(tmp_path / "m.pt", model, CONFIG, optimizer=optimizer, scheduler=scheduler)
    checkpoint = load_checkpoint(path, map_location="cuda")  # the checksum is computed on the GPU tensors
    resumed = new_model(seed=1).cuda()
    optimizer2, scheduler2 = make_optimizer(resumed, 16, 10)
    restore(checkpoint, resumed, optimizer2, scheduler2)
    assert_close(resumed.state_dict(), model.state_dict(), rtol=0, atol=0)


@pytest.mark.parametrize("content, message", [
    (b"", "is empty, not a checkpoint"),
    (b"epochs: 3\nloss: 1.5\n", "is a text file ('epochs: 3\\nloss: 1.5'...), not a checkpoint"),
    (b"\x01\x02\x03 binary", "is not a checkpoint: its first bytes are not those of a file written by torch.save"),
])
def test_a_file_that_is_not_a_checkpoint_is_named_for_what_it_is_not_as_code(tmp_path, content, message):
    (tmp_path / "x.pt").write_bytes(content)
    with pytest.raises(CheckpointError, match=re.escape(message)) as error:
        load_checkpoint(tmp_path / "x.pt")
    assert "could run code" not in str(error.value)


def test_a_safetensors_file_given_as_a_checkpoint_points_at_its_folder(tmp_path):
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(2)}, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match="is a safetensors file .* give the folder that holds it"):
        load_checkpoint(tmp_path / "model.safetensors")


@pytest.mark.parametrize("change, message", [
    ({"heads": 2}, r"unknown configuration field\(s\) 'heads'"),
    ({"h": 7}, r"d_model=16 is not divisible by h=7"),
    ({"src_vocab_size": None}, r"src_vocab_size must be a positive integer, got None"),
])
def test_a_checkpoint_whose_config_cannot_build_a_model_is_a_checkpoint_error(tmp_path, change, message):
    checkpoint = load_checkpoint(save_checkpoint(tmp_path / "m.pt", new_model(), CONFIG))
    checkpoint["config"] = {**checkpoint["config"], **change}
    with pytest.raises(CheckpointError, match=message):
        model_from_checkpoint(checkpoint)
