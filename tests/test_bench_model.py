"""benchmarks/bench_model.py compares the course's model with nn.Transformer at equal work: the same
dropout draws over the same entries in a training step (issue 39), and says so in its output."""

import importlib.util
from dataclasses import replace
from pathlib import Path

import torch

from annotated.masks import padding_mask, target_mask
from annotated.model import make_model

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("bench_model", ROOT / "benchmarks" / "bench_model.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def small(config):
    return replace(config, src_vocab_size=50, tgt_vocab_size=50, N=2, d_model=32, d_ff=64, h=4, max_len=12)


def batch():
    g = torch.Generator().manual_seed(0)
    src, tgt = torch.randint(4, 50, (3, 9), generator=g), torch.randint(4, 50, (3, 7), generator=g)
    src[:, -2:] = 0
    return src, tgt


def ours_work(config, fast=True):
    torch.manual_seed(0)
    model = make_model(replace(config, fast_attention=fast)).train()
    src, tgt = batch()
    return bench.dropout_work(lambda: model(src, tgt, padding_mask(src, 0), target_mask(tgt, 0)))


def theirs_work(config):
    torch.manual_seed(0)
    model = bench.TorchSeq2Seq(config).train()
    src, tgt = batch()
    return bench.dropout_work(lambda: model(src, tgt))


def test_the_default_comparison_is_equal_work():
    equal = small(bench.EQUAL_WORK)
    assert equal.attention_dropout == equal.ff_dropout == equal.dropout > 0
    theirs = theirs_work(equal)
    assert theirs[0] > 0
    assert ours_work(equal, fast=True) == theirs  # the fast path: dropout_p inside F.scaled_dot_product_attention
    assert ours_work(equal, fast=False) == theirs  # the teaching path: nn.Dropout on the weights


def test_the_papers_configuration_does_less_work():
    paper, theirs = small(bench.PAPER), theirs_work(small(bench.EQUAL_WORK))
    draws, entries = ours_work(paper)
    assert paper.attention_dropout == paper.ff_dropout == 0.0
    assert draws < theirs[0] and entries < theirs[1]


def test_torch_side_has_no_final_norms():
    """nn.Transformer ends each stack with a LayerNorm the paper's post-norm stack lacks: removed."""
    model = bench.TorchSeq2Seq(small(bench.EQUAL_WORK))
    assert model.transformer.encoder.norm is None and model.transformer.decoder.norm is None


def test_report_prints_ratios_to_the_first(capsys):
    ratios = bench.report("title", {"theirs": [2.0, 2.0, 2.0], "ours": [1.0, 1.0, 3.0]})
    assert ratios == {"theirs": 1.0, "ours": 0.5}
    assert "0.500x" in capsys.readouterr().out


def test_the_fast_row_runs_the_fused_kernels_and_the_teaching_row_the_formulas(monkeypatch):
    """The fast path calls F.layer_norm in every LayerNorm; the teaching path none (notebook 06's formula)."""
    monkeypatch.setattr(bench, "EQUAL_WORK", small(bench.EQUAL_WORK))
    monkeypatch.setattr(bench, "VOCAB", 50)
    monkeypatch.setattr(bench, "BATCH", 3)
    monkeypatch.setattr(bench, "LENGTH", 9)
    calls = []
    real = torch.nn.functional.layer_norm
    monkeypatch.setattr(torch.nn.functional, "layer_norm", lambda *a, **k: calls.append(1) or real(*a, **k))
    contenders = bench.training_contenders(torch.device("cpu"))
    contenders["ours, teaching path"][1]()
    assert calls == []
    contenders["ours, fast path"][1]()
    assert len(calls) == 2 * 2 + 3 * 2  # N=2: two norms in each encoder layer, three in each decoder layer
