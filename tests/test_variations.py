"""Table 3's variations (annotated/variations.py) and the benchmark that trains them (benchmarks/table3.py)."""

import json
import signal
import subprocess
import sys
import time

import pytest
import torch
from torch.testing import assert_close

from annotated.attention import scaled_dot_product_attention
from annotated.decoding import greedy_decode
from annotated.learned_positions import LearnedPositionalEncoding
from annotated.masks import padding_mask
from annotated.model import TransformerConfig, count_parameters, make_model
from annotated.multi_head import MultiHeadAttention
from annotated.positional import PositionalEncoding
from annotated.support.course import ROOT
from annotated.support.table3 import claim, flags_on_normal_noise, read_records
from annotated.variations import (NarrowKeyAttention, holm, make_variant, paired_differences, paired_spread,
                                  paired_test, smallest_detectable, table3_parameters, unstable_runs, verdict)
from tests.test_data import needs_real_data


def test_narrow_keys_at_full_width_are_multi_head_attention():
    torch.manual_seed(0)
    x, memory = torch.randn(3, 5, 24), torch.randn(3, 7, 24)
    mask = torch.ones(3, 1, 7, dtype=torch.bool)
    mask[2, :, 4:] = False
    base, same = MultiHeadAttention(24, 3).eval(), NarrowKeyAttention(24, 3, d_k=8).eval()
    same.load_state_dict(base.state_dict())
    assert_close(same(x, memory, memory, mask), base(x, memory, memory, mask))


@pytest.mark.parametrize("fast", [True, False])
def test_narrow_keys_scale_by_their_own_width_and_keep_the_values_width(fast):
    torch.manual_seed(1)
    layer = NarrowKeyAttention(32, 4, d_k=3, fast=fast).eval()
    assert layer.W_Q.out_features == layer.W_K.out_features == 12 and layer.W_V.out_features == 32
    x = torch.randn(2, 6, 32)
    q = layer.W_Q(x).view(2, 6, 4, 3).transpose(1, 2)
    k = layer.W_K(x).view(2, 6, 4, 3).transpose(1, 2)
    v = layer.W_V(x).view(2, 6, 4, 8).transpose(1, 2)
    heads, _ = scaled_dot_product_attention(q, k, v)
    assert_close(layer(x, x, x), layer.W_O(heads.transpose(1, 2).reshape(2, 6, 32)))
    # The wrong scale, 1/sqrt(d_model / h), gives another output: the test can fail.
    wrong = torch.softmax(q @ k.transpose(-2, -1) / 8 ** 0.5, -1) @ v
    assert not torch.allclose(layer(x, x, x), layer.W_O(wrong.transpose(1, 2).reshape(2, 6, 32)), atol=1e-4)


def test_a_key_size_below_one_is_refused():
    with pytest.raises(ValueError, match="d_k=0"):
        NarrowKeyAttention(16, 2, d_k=0)


def test_a_row_b_model_decodes_the_same_with_and_without_the_cache():
    torch.manual_seed(2)
    model = make_variant(TransformerConfig(40, 40, N=2, d_model=16, h=2, d_ff=32, share_embeddings=True), d_k=3)
    model.eval()
    assert all(isinstance(m, NarrowKeyAttention) for m in model.modules() if isinstance(m, MultiHeadAttention))
    assert sum(isinstance(m, NarrowKeyAttention) for m in model.modules()) == 6  # 2 encoder + 2 x 2 decoder
    src = torch.randint(3, 40, (2, 6))
    mask = padding_mask(src, 0)
    assert torch.equal(greedy_decode(model, src, mask, 9, eos_idx=None),
                       greedy_decode(model, src, mask, 9, eos_idx=None, use_cache=False))


def test_row_e_puts_a_learned_table_on_both_sides_and_nothing_else_changes():
    config = TransformerConfig(30, 30, N=1, d_model=8, h=2, d_ff=16, share_embeddings=True)
    model = make_variant(config, learned_positions=True, max_len=40)
    assert [type(e[1]) for e in (model.src_embed, model.tgt_embed)] == [LearnedPositionalEncoding] * 2
    assert count_parameters(model) - count_parameters(make_model(config)) == 2 * 40 * 8
    assert isinstance(make_variant(config).src_embed[1], PositionalEncoding)


@pytest.mark.parametrize("sizes", [{}, {"d_k": 2}, {"h": 1}, {"N": 3, "d_ff": 7}, {"learned_positions": True}])
def test_the_meta_count_is_the_count_of_the_built_model(sizes):
    base = {"N": 2, "d_model": 12, "h": 3, "d_ff": 20}
    config = TransformerConfig(17, 17, share_embeddings=True, **{**base, **{k: v for k, v in sizes.items()
                                                                         if k in ("N", "h", "d_ff")}})
    built = make_variant(config, sizes.get("d_k"), sizes.get("learned_positions", False))
    assert table3_parameters(17, **{**base, **sizes}) == count_parameters(built)


def test_paper_sized_counts_match_table_3_to_its_rounding_in_their_change_from_the_base():
    base = table3_parameters(37000)
    assert base == 63_119_496 and table3_parameters(37000, d_model=1024, d_ff=4096, h=16) == 214_282_376
    for sizes, paper in [({"d_k": 16}, 58), ({"d_k": 32}, 60), ({"N": 2}, 36), ({"N": 4}, 50), ({"N": 8}, 80),
                         ({"d_ff": 1024}, 53), ({"d_ff": 4096}, 90)]:
        assert abs((table3_parameters(37000, **sizes) - base) / 1e6 - (paper - 65)) < 1.0, sizes
    assert table3_parameters(37000, h=1) == table3_parameters(37000, h=32) == base  # row A keeps the count


def test_paired_differences_pair_runs_by_seed_and_skip_the_base_seeds_a_row_has_not_run():
    assert paired_differences({0: 20.0, 1: 17.0, 2: 19.0}, {2: 18.0, 0: 21.5}) == {0: 1.5, 2: -1.0}


def test_a_row_run_without_its_base_run_is_an_error_not_dropped():
    with pytest.raises(ValueError, match=r"row has seed\(s\) \[3\] that base lacks"):
        paired_differences({0: 20.0, 1: 17.0, 2: 19.0}, {2: 18.0, 0: 21.5, 3: 30.0})
    with pytest.raises(ValueError, match="row holds no run"):
        paired_differences({0: 20.0}, {})


def test_an_odd_run_is_unstable_and_a_row_of_two_seeds_is_not_judged():
    rows = {"a": {0: 1.0, 1: 1.2, 2: 0.8, 3: 1.1}, "b": {0: -0.5, 1: -0.3, 2: -0.6, 3: -8.0},
            "c": {0: 0.1, 1: 0.3, 2: 0.2}, "d": {0: 50.0, 1: -50.0}}
    assert unstable_runs(rows) == {("b", 3)}
    assert unstable_runs({"d": {0: 50.0, 1: -50.0}}) == set()
    assert unstable_runs(rows, cutoff=1000.0) == set()


def test_the_paired_spread_pools_deviations_around_each_rows_mean():
    # deviations +-1 in a, +-2 in b; c has one seed: sqrt((1 + 1 + 4 + 4) / 2) with 2 degrees of freedom
    assert paired_spread({"a": [0.0, 2.0], "b": [8.0, 12.0], "c": [5.0]}) == (pytest.approx(5 ** 0.5), 2)
    with pytest.raises(ValueError, match="no row has two paired seeds"):
        paired_spread({"a": [1.0]})


def test_the_paired_test_is_a_t_test_with_the_pooled_freedom():
    result = paired_test([1.0, 2.0, 3.0, 2.0], spread=1.0, freedom=10)
    # mean 2, standard error 1 / 2, t = 4 with 10 degrees of freedom: p = 0.0025, half-width 2.228 / 2
    assert result["effect"] == 2.0 and result["p"] == pytest.approx(0.002518, abs=1e-6)
    assert (result["low"], result["high"]) == (pytest.approx(2 - 1.1141, abs=1e-4), pytest.approx(2 + 1.1141, abs=1e-4))
    assert paired_test([-2.0, -2.0], 1.0, 10)["p"] == paired_test([2.0, 2.0], 1.0, 10)["p"]  # two-sided
    with pytest.raises(ValueError, match="spread=0"):
        paired_test([1.0, 1.0], 0.0, 10)


def test_holm_steps_down_and_stops_at_the_first_failure():
    # m = 4: 0.01 <= 0.0125, 0.015 <= 0.0167, 0.03 > 0.025: stop; 0.04 is not rejected though <= 0.05
    assert holm({"a": 0.03, "b": 0.01, "c": 0.04, "d": 0.015}) == {"b", "d"}
    assert holm({"a": 0.026, "b": 0.5}) == set()  # the smallest fails alpha / 2: nothing rejected
    assert holm({"a": 0.02, "b": 0.04}) == {"a", "b"}  # Bonferroni (0.025 each) would reject only a
    assert holm({}) == set()


def test_a_nan_p_value_is_an_error_not_a_verdict():
    # Before the guard a NaN p-value rejected nothing: "cannot tell at this budget", a verdict read from NaN.
    for p_values in ({"a": float("nan")}, {"a": float("nan"), "b": 0.001}, {"a": 1.5}):
        with pytest.raises(ValueError, match=r"p_values\['a'\] = .* is not a p-value in \[0, 1\]"):
            holm(p_values)
    with pytest.raises(ValueError, match=r"alpha=0 must be a probability in \(0, 1\)"):
        holm({"a": 0.01}, alpha=0)


def test_the_smallest_detectable_difference_and_the_verdicts():
    # normal-like freedom: (z_{1 - 0.05/36/2} + z_0.8) * 1 / 2 = (3.20 + 0.84) / 2 ~ 2.03
    assert smallest_detectable(1.0, 10_000, seeds=4, comparisons=36) == pytest.approx(2.02, abs=0.02)
    assert smallest_detectable(1.0, 3, 4, 36) > smallest_detectable(1.0, 54, 4, 36)  # fewer freedoms, wider
    assert verdict(-3.0, True, -0.9) == "agrees with the paper"
    assert verdict(3.0, True, -0.9) == verdict(1.0, True, 0.0) == "disagrees with the paper"
    assert verdict(-3.0, False, -0.9) == "cannot tell at this budget"
    assert verdict(-3.0, True, None) == "a change (the paper has no such row)"


NAN = float("nan")


@pytest.mark.parametrize("call, message", [
    (lambda: paired_differences({0: 20.0, 1: NAN}, {0: 21.0, 1: 18.0}), r"base\[1\] = nan: a score must be a finite"),
    (lambda: paired_differences({0: 20.0}, {0: float("inf")}), r"row\[0\] = inf: a score must be a finite"),
    (lambda: unstable_runs({"a": {0: 1.0, 1: NAN, 2: 0.5}}), r"differences\['a'\]\[1\] = nan"),
    (lambda: unstable_runs({"a": {0: 1.0}}, cutoff=0), r"cutoff=0 must be a finite number > 0"),
    (lambda: paired_spread({"a": [1.0, NAN], "b": [1.0, 2.0]}), r"differences\['a'\]\[1\] = nan: a paired difference"),
    # a dict of seeds where the list belongs: the sums would have added the seeds, not the differences
    (lambda: paired_spread({"a": {0: 1.0, 1: 2.0}}), r"differences\['a'\] must be a list .* list\(ds.values\(\)\)"),
    (lambda: paired_test([1.0, NAN], 1.0, 3), r"ds\[1\] = nan"),
    (lambda: paired_test([1.0], 1.0, 3), r"ds holds 1 paired difference\(s\): the rule tests a row of two seeds"),
    (lambda: paired_test([], 1.0, 3), r"ds holds 0 paired difference"),
    (lambda: paired_test([1.0, 2.0], NAN, 3), r"spread=nan: a pooled spread .* finite number > 0"),
    (lambda: paired_test([1.0, 2.0], 1.0, 0), "freedom must be a positive integer, got 0"),
    (lambda: smallest_detectable(1.0, 3, 4, 0), "comparisons must be a positive integer, got 0"),
    (lambda: smallest_detectable(1.0, 3, 4, 36, power=1.0), r"power=1.0 must be a probability in \(0, 1\)"),
    (lambda: verdict(NAN, True, -0.9), r"effect = nan: an effect must be a finite number"),
    (lambda: verdict(1.0, "yes", -0.9), "rejected must be True or False"),
    (lambda: verdict(1.0, True, NAN), r"paper_change = nan"),
    (lambda: make_variant(TransformerConfig(40, 40, N=1, d_model=16, h=2, d_ff=32), d_k=0), "d_k must be a positive"),
    (lambda: make_variant(TransformerConfig(40, 40, N=1, d_model=16, h=2, d_ff=32), max_len=0), "max_len must be a"),
    (lambda: make_variant({"d_model": 16}), "config must be a TransformerConfig, got dict"),
    (lambda: table3_parameters(0), "vocab_size must be a positive integer, got 0"),
    (lambda: NarrowKeyAttention(16, 2, d_k=2.5), "d_k=2.5 must be a positive number"),
])
def test_a_nan_score_a_short_row_or_a_value_out_of_range_is_named_not_computed_on(call, message):
    # Before the guards: a NaN spread, effect or p-value went on silently, and verdict(NaN, True, -0.9) read the
    # sign of NaN as "disagrees with the paper".
    with pytest.raises((ValueError, TypeError), match=message):
        call()


def test_scores_read_from_pandas_are_numbers_like_any_other():
    np = pytest.importorskip("numpy")
    base, row = {np.int64(0): np.float64(20.0), np.int64(1): np.float64(17.0)}, {np.int64(0): np.float64(21.0)}
    assert paired_differences(base, row) == {0: 1.0}
    assert verdict(np.float64(-1.0), np.bool_(True), -0.5) == "agrees with the paper"


def test_a_cut_last_line_of_the_record_is_named_and_skipped(tmp_path):
    out = tmp_path / "t.jsonl"
    out.write_text('{"row": "base", "seed": 0}\n{"row": "A1", "se')
    warnings = []
    assert read_records(out, warn=warnings.append) == [{"row": "base", "seed": 0}]
    assert len(warnings) == 1 and "line 2" in warnings[0] and "skipped" in warnings[0]


def test_a_claim_held_by_a_process_that_is_not_table3_is_refused_with_a_clear_error(tmp_path):
    out = tmp_path / "t.jsonl"
    out.with_name("t.jsonl.A1.seed0.running").write_text("1")  # pid 1: alive, and not a table3.py run
    with pytest.raises(SystemExit, match="alive but not a table3.py run"):
        claim(out, "A1", 0)
    dead = out.with_name("t.jsonl.A2.seed0.running")
    dead.write_text("999999999")  # no such process: the claim is taken over
    assert claim(out, "A2", 0) and dead.read_text() != "999999999"


def run_table3(*args):
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "table3.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=600)


def test_the_benchmark_lists_every_row_and_seed_and_refuses_bad_options(tmp_path):
    listed = run_table3("--list")
    assert listed.returncode == 0 and len(listed.stdout.splitlines()) == 4 * 19
    for args, message in [(["--updates", "0"], "at least one update"),
                          (["--out", tmp_path / "missing" / "t.jsonl"], "does not exist"),
                          (["--out", tmp_path], "a folder, not a record file"),
                          (["--out", tmp_path / "t.jsonl", "--threads", "0"], "at least one thread"),
                          (["--out", tmp_path / "t.jsonl", "--seeds", "0", "7"], "--seeds 7: no row runs that seed"),
                          ([], "--out is required")]:
        result = run_table3(*args)
        assert result.returncode == 2 and message in result.stderr, (args, result.stderr)


@needs_real_data
def test_a_recorded_run_is_skipped_and_its_record_is_complete(tmp_path):
    out = tmp_path / "t.jsonl"
    args = ["--out", out, "--rows", "B8", "--seeds", "0", "--updates", "1", "--limit", "12"]
    first = run_table3(*args)
    assert first.returncode == 0, first.stderr
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["row"] == "B8" and record["seed"] == 0 and record["updates"] == 1
    assert record["recipe"]["d_k"] == 8 and record["recipe"]["limit"] == 12
    assert {"val_ppl_per_piece", "val_bleu_greedy", "val_bleu_beam", "parameters", "code_path", "command"} <= set(record)
    assert 0 <= record["train_cpu_minutes"] <= record["train_minutes"] + 0.01  # one thread: CPU time within the clock's
    again = run_table3(*args)
    assert again.returncode == 0 and "0 run(s) to do" in again.stdout
    assert len(out.read_text().splitlines()) == 1


@needs_real_data
def test_sigterm_stops_a_run_as_ctrl_c_does_and_releases_its_claim(tmp_path):
    out = tmp_path / "t.jsonl"
    running = out.with_name("t.jsonl.B8.seed0.running")
    process = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "table3.py"), "--out", str(out), "--rows",
                                "B8", "--seeds", "0", "--updates", "100000", "--limit", "12"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not running.exists():  # the run has claimed its seed and is training
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.2)
    time.sleep(1)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM and "stopped by SIGTERM" in stderr, stderr
    assert not running.exists() and not out.exists()  # the claim released, no line for a run that did not end


def test_the_unstable_rule_flags_few_runs_of_four_seeds_on_noise_and_many_more_of_three():
    # variations.unstable_runs: "about 0.16 runs of an 18-row table" of 4 seeds; a row of 3 has one residual 0
    assert 0.11 < flags_on_normal_noise(18, 4, trials=1500) < 0.2
    assert 0.75 < flags_on_normal_noise(5, 3, trials=1500) < 1.0
