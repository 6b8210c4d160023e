"""annotated.heads (notebook 12): reading, summarising and masking the heads of a model."""

import math
import warnings

import matplotlib
import pytest
import torch
import torch.nn as nn

from annotated.batching import collate
from annotated.decoding import greedy_decode
from annotated.heads import (attention_modules, attention_statistics, collect_attention, head_statistics,
                             heads_masked, sentence_attention, to_words, word_ids, words_of)
from annotated.model import TransformerConfig, make_model
from annotated.multi_head import MultiHeadAttention
from annotated.support.attention_figures import plot_attention, plot_heads
from annotated.support.reference import copy_mha_from_torch

matplotlib.use("Agg")
PAD = 0


def small_model(N=2, h=4, d_model=16):
    torch.manual_seed(0)
    return make_model(TransformerConfig(src_vocab_size=11, tgt_vocab_size=13, N=N, d_model=d_model, d_ff=32, h=h,
                                        dropout=0.0)).eval()


def random_batch(batch, len_src, len_tgt, seed=0):
    g = torch.Generator().manual_seed(seed)
    examples = []
    for b in range(batch):
        n_src, n_tgt = len_src - b % 3, len_tgt - b % 2  # some rows padded
        examples.append((torch.randint(4, 11, (n_src,), generator=g).tolist(),
                         [1, *torch.randint(4, 13, (n_tgt - 2,), generator=g).tolist(), 2]))
    return collate(examples, PAD)


@pytest.mark.parametrize("N, h, batch, len_src, len_tgt", [(2, 4, 3, 7, 6), (3, 2, 5, 4, 9)])
def test_collect_attention_gives_every_head_of_every_kind(N, h, batch, len_src, len_tgt):
    model = small_model(N, h)
    b = random_batch(batch, len_src, len_tgt)
    weights = collect_attention(model, b)
    L_s, L_t = b.src.size(1), b.tgt_in.size(1)
    assert weights["encoder"].shape == (N, batch, h, L_s, L_s)
    assert weights["decoder"].shape == (N, batch, h, L_t, L_t)
    assert weights["cross"].shape == (N, batch, h, L_t, L_s)
    src_valid, tgt_valid = b.src != PAD, b.tgt_in != PAD
    for kind, valid in [("encoder", src_valid), ("decoder", tgt_valid), ("cross", tgt_valid)]:
        sums = weights[kind].sum(-1).transpose(1, 2)  # (N, h, batch, L_q)
        torch.testing.assert_close(sums[:, :, valid], torch.ones_like(sums[:, :, valid]))
    # No weight on padded keys, none on the future.
    assert (~src_valid).any()
    for kind in ("encoder", "cross"):
        on_keys = weights[kind].permute(0, 2, 3, 1, 4)  # (N, h, L_q, batch, L_k)
        assert (on_keys[..., ~src_valid] == 0).all()
    assert (weights["decoder"][..., torch.ones(L_t, L_t, dtype=torch.bool).triu(1)] == 0).all()
    # The blocks are back on the fast path, with nothing kept.
    for block in (a for blocks in attention_modules(model).values() for a in blocks):
        assert block.keep_attention is False and block.attention is None


def test_encoder_weights_equal_nn_multihead_attention():
    """The weights collected from the first encoder layer are those of nn.MultiheadAttention."""
    model = small_model()
    b = random_batch(4, 6, 5)
    ours = model.encoder.layers[0].self_attn
    theirs = nn.MultiheadAttention(ours.d_model, ours.h, batch_first=True)
    copy_mha_from_torch(ours, theirs)  # the model's block now holds nn.MultiheadAttention's parameters
    x = model.src_embed(b.src)  # post-norm: the first sub-layer sees the embeddings themselves
    _, expected = theirs(x, x, x, key_padding_mask=b.src == PAD, need_weights=True, average_attn_weights=False)
    torch.testing.assert_close(collect_attention(model, b)["encoder"][0], expected.detach())


@pytest.mark.parametrize("dropped", [[0], [1, 3], [0, 1, 2, 3]])
def test_masked_heads_equal_nn_multihead_attention_with_their_output_columns_zeroed(dropped):
    torch.manual_seed(0)
    ours = MultiHeadAttention(16, 4)
    theirs = nn.MultiheadAttention(16, 4, batch_first=True)
    copy_mha_from_torch(ours, theirs)
    model = small_model(N=1, h=4)
    model.decoder.layers[0].src_attn = ours
    x, memory = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    with torch.no_grad():
        for k in dropped:
            theirs.out_proj.weight[:, k * 4 : (k + 1) * 4] = 0
        expected, _ = theirs(x, memory, memory, need_weights=False)
        with heads_masked(model, [("cross", 0, k) for k in dropped]):
            got = ours(x, memory, memory)
    torch.testing.assert_close(got, expected)


def test_masking_applies_in_cached_decoding_and_goes_away_after():
    model = small_model()
    b = random_batch(3, 6, 5)
    plain = greedy_decode(model, b.src, b.src_mask, 8)
    heads = [("cross", 1, 0), ("cross", 1, 1), ("cross", 1, 2), ("decoder", 0, 3), ("encoder", 1, 2)]
    with heads_masked(model, heads):
        cached = greedy_decode(model, b.src, b.src_mask, 8, use_cache=True)
        uncached = greedy_decode(model, b.src, b.src_mask, 8, use_cache=False)
        logits = model(b.src, b.tgt_in, b.src_mask, b.tgt_mask)
    assert torch.equal(cached, uncached)
    assert not torch.allclose(logits, model(b.src, b.tgt_in, b.src_mask, b.tgt_mask))  # masking changed something
    assert torch.equal(greedy_decode(model, b.src, b.src_mask, 8), plain)  # and is gone


def test_masking_is_undone_when_the_block_raises():
    model = small_model()
    b = random_batch(2, 5, 4)
    before = model(b.src, b.tgt_in, b.src_mask, b.tgt_mask)
    with pytest.raises(RuntimeError), heads_masked(model, [("encoder", 0, 0)]):
        raise RuntimeError("inside")
    torch.testing.assert_close(model(b.src, b.tgt_in, b.src_mask, b.tgt_mask), before)


@pytest.mark.parametrize("head, message", [(("self", 0, 0), "unknown kind"), (("cross", 2, 0), "layers 0..1"),
                                           (("cross", 0, 4), "heads 0..3"), (("decoder", -1, 0), "layers 0..1"),
                                           (("encoder", 0, 1.0), "heads 0..3")])
def test_a_head_that_does_not_exist_is_a_clear_error(head, message):
    with pytest.raises(ValueError, match=message), heads_masked(small_model(), [head]):
        pass


@pytest.mark.parametrize("pieces, ids, words", [
    (["<s>", "zwei", "hunde", "@@.", "</s>"], [0, 1, 2, 3, 4], ["<s>", "zwei", "hunde", ".", "</s>"]),
    (["feuer@@", "wehr@@", "mann", "@@."], [0, 0, 0, 1], ["feuerwehrmann", "."]),
    (["a@@", "@@b", "c"], [0, 0, 1], ["ab", "c"]),
    ([], [], []),
])
def test_pieces_are_grouped_into_words(pieces, ids, words):
    assert word_ids(pieces) == ids
    assert words_of(pieces) == words


def test_to_words_sums_to_a_word_and_averages_from_a_word():
    keys = ["<s>", "feuer@@", "wehr", "kommt", "</s>"]  # 5 pieces, 4 words
    queries = ["<s>", "fire@@", "men", "come"]  # 4 pieces, 3 words
    torch.manual_seed(0)
    w = torch.rand(2, 4, 5).softmax(-1)  # (heads, L_q, L_k)
    got = to_words(w, queries, keys)
    assert got.shape == (2, 3, 4)
    torch.testing.assert_close(got.sum(-1), torch.ones(2, 3))
    to_fire = w[:, :, 1] + w[:, :, 2]  # to "feuerwehr": summed over its pieces
    torch.testing.assert_close(got[:, 1, 1], to_fire[:, 1:3].mean(-1))  # from "firemen": averaged
    torch.testing.assert_close(got[:, 0, 2], w[:, 0, 3])
    plain = ["<s>", "a", "b", "</s>"]
    torch.testing.assert_close(to_words(w[:, :, :4], plain, plain), w[:, :, :4])  # no split, no change


@pytest.mark.parametrize("L", [4, 7])
def test_head_statistics_of_heads_whose_answer_is_known(L):
    """Head 0 looks at the previous token (the first row at itself), head 1 spreads evenly over
    what it may see; the last query of batch row 1 is padding and does not count."""
    batch, h = 2, 2
    mask = torch.ones(batch, L, L, dtype=torch.bool).tril()
    w = torch.zeros(batch, h, L, L)
    for i in range(L):
        w[:, 0, i, max(i - 1, 0)] = 1.0
        w[:, 1, i, : i + 1] = 1.0 / (i + 1)
    valid = torch.ones(batch, L, dtype=torch.bool)
    valid[1, -1] = False
    eos = torch.zeros(batch, L, dtype=torch.bool)
    eos[:, 0] = True
    sums = head_statistics(w, mask, valid, {"first": eos}, max_offset=3)
    rows = 2 * L - 1
    assert sums["rows"].tolist() == [rows, rows]
    counted = [L, L - 1]  # queries per batch row
    previous_rows = sum(n - 1 for n in counted)
    torch.testing.assert_close(sums["previous"][0], torch.tensor(float(previous_rows)))
    torch.testing.assert_close(sums["confidence"][0], torch.tensor(float(rows)))
    torch.testing.assert_close(sums["entropy"][0], torch.tensor(0.0))
    expected_entropy = sum(math.log(i + 1) for n in counted for i in range(n))
    torch.testing.assert_close(sums["entropy"][1], torch.tensor(expected_entropy))
    torch.testing.assert_close(sums["uniform"][1], torch.tensor(expected_entropy))  # uniform: entropy = log n
    torch.testing.assert_close(sums["distance"][0], torch.tensor(float(previous_rows)))
    assert sums["offset"][0].tolist() == [0, 0, previous_rows, batch, 0, 0, 0]  # offsets -3..3
    torch.testing.assert_close(sums["first"][0], torch.tensor(float(batch + batch)))  # rows 0 and 1 look at key 0
    assert sums["next"].sum() == 0


def test_confidence_leaves_eos_out_of_the_maximum_and_max_weight_keeps_it():
    """Voita et al.'s confidence: the largest weight on a key other than </s>."""
    w = torch.tensor([[[[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]]]])  # (1, 1, 2, 3): row 0 peaks on key 0, row 1 on key 2
    eos = torch.tensor([[False, False, True]])
    mask, valid = torch.ones(1, 1, 3, dtype=torch.bool), torch.ones(1, 2, dtype=torch.bool)
    with_eos = head_statistics(w, mask, valid, {"</s>": eos})
    torch.testing.assert_close(with_eos["confidence"], torch.tensor([0.7 + 0.3]))  # row 1: 0.3, not 0.6 on </s>
    torch.testing.assert_close(with_eos["max weight"], torch.tensor([0.7 + 0.6]))
    torch.testing.assert_close(head_statistics(w, mask, valid, {})["confidence"], torch.tensor([0.7 + 0.6]))


def test_the_decoders_row_0_counts_only_when_asked():
    """Row 0 of decoder self-attention sees only <s>: weight 1 there, in every head."""
    model = small_model()
    b = random_batch(4, 6, 5)
    without = attention_statistics(model, [b], {"bos": lambda ids: ids == 1})
    with_0 = attention_statistics(model, [b], {"bos": lambda ids: ids == 1}, decoder_row_0=True)
    rows = int((b.tgt_y != PAD).sum())
    # Each head's sum over rows gains exactly 1 per sentence on itself (row 0 is <s>): means move accordingly.
    torch.testing.assert_close(with_0["decoder"]["self"] * rows,
                               without["decoder"]["self"] * (rows - b.tgt_y.size(0)) + b.tgt_y.size(0))
    for kind in ("encoder", "cross"):  # only the decoder's self-attention changes
        torch.testing.assert_close(with_0[kind]["self"], without[kind]["self"])


def test_attention_statistics_are_means_over_rows():
    model = small_model()
    b = random_batch(4, 6, 5)
    stats = attention_statistics(model, [b, random_batch(3, 4, 7, seed=1)], {"pad": lambda ids: ids == PAD})
    for kind in ("encoder", "decoder", "cross"):
        assert stats[kind]["entropy"].shape == (2, 4)
        assert ((stats[kind]["confidence"] > 0) & (stats[kind]["confidence"] <= 1 + 1e-6)).all()
        assert (stats[kind]["entropy"] <= stats[kind]["uniform"] + 1e-5).all()
        torch.testing.assert_close(stats[kind]["pad"], torch.zeros(2, 4))  # padded keys get no weight
        assert (stats[kind]["offset"].sum(-1) <= 1 + 1e-6).all()
    assert (stats["decoder"]["next"] == 0).all()  # the future is masked


@pytest.fixture(scope="module")
def shipped():
    from annotated import load_pretrained

    return load_pretrained()


def test_sentence_attention_labels_are_the_tokens_in_order(shipped):
    model, tokenizer = shipped
    german = "Ein Feuerwehrmann steigt aus dem Auto aus."
    found = sentence_attention(model, tokenizer, german)
    assert found.source == ["<s>", *tokenizer.tokenize(german), "</s>"]
    assert found.read[0] == "<s>" and found.produced[-1] == "</s>" and found.read[1:] == found.produced[:-1]
    assert tokenizer.detokenize(found.produced[:-1]) == tokenizer.decode(
        greedy_decode(model, torch.tensor([tokenizer.encode(german)]), None, 40)[0].tolist())
    for kind, w in found.weights.items():
        rows, cols = found.labels(kind)
        assert w.shape[-2:] == (len(rows), len(cols))
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]))
    future = torch.ones(len(found.read), len(found.read), dtype=torch.bool).triu(1)
    assert (found.weights["decoder"][..., future] == 0).all()
    given = sentence_attention(model, tokenizer, german, "A fireman gets out of the car.")
    assert given.produced[:-1] == tokenizer.text.tokenize_en("A fireman gets out of the car.")


@pytest.mark.parametrize("german, english, error, message", [
    ("", None, ValueError, r"^german is empty: the maps would be those of a sentence the model made up; give a "
                           r"sentence, e.g. 'Zwei Hunde spielen im Schnee.'$"),
    ("   ", None, ValueError, r"^german is empty: "),
    ("\u200b\x1b", None, ValueError, r"^german is empty once control characters are removed"),
    ("123 ---", None, ValueError, r"^german has no letter to translate \('123 ---'\): the model reads German"),
    ("مرحبا بالعالم", None, ValueError, r"^german is written in the Arabic script, which the model does not know"),
    ("Hund " * 201, None, ValueError, r"^german has 201 tokens, more than the 200 translate\(\) accepts"),
    (b"Ein Mann.", None, TypeError, r"^german must be one sentence \(a str\), got a bytes; decode bytes first"),
    (["Ein Mann.", "Zwei Hunde."], None, TypeError, r"^german must be one sentence \(a str\), got a list; call "
                                                    r"sentence_attention once per sentence"),
    ("Ein Mann.", "", ValueError, r"^english is empty: .* leave english out \(None\) to see the model's own"),
    ("Ein Mann.", 3, TypeError, r"^english must be one sentence \(a str\), got a int"),
])
def test_sentence_attention_makes_the_checks_translate_makes(shipped, german, english, error, message):
    """Before these checks an empty sentence got the attention maps of a sentence the model made up."""
    model, tokenizer = shipped
    with pytest.raises(error, match=message), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the note on what was removed
        sentence_attention(model, tokenizer, german, english)


def test_sentence_attention_needs_the_model_and_its_own_tokenizer(shipped):
    from annotated.support.tokenizer import Tokenizer
    from annotated.vocab import Vocab

    model, tokenizer = shipped
    with pytest.raises(TypeError, match=r"^sentence_attention needs a model and its tokenizer"):
        sentence_attention(model, None, "Ein Mann.")
    with pytest.raises(TypeError, match=r"^model and tokenizer are swapped"):
        sentence_attention(tokenizer, model, "Ein Mann.")
    other = Vocab(tokenizer.src_vocab.get_itos()[:100])
    with pytest.raises(ValueError, match=r"^the tokenizer's vocabularies \(100 source and 100 target tokens\) do "
                                         r"not fit the model"):
        sentence_attention(model, Tokenizer(other, other, tokenizer.merges), "Ein Mann.")


def test_sentence_attention_removes_invisible_characters_with_a_warning(shipped):
    model, tokenizer = shipped
    with pytest.warns(UserWarning, match=r"german: removed 1 control or invisible character\(s\) \(U\+200B"):
        found = sentence_attention(model, tokenizer, "Zwei\u200b Hunde.")
    assert found.source == sentence_attention(model, tokenizer, "Zwei Hunde.").source


def test_figures_are_labelled_with_the_tokens(shipped):
    model, tokenizer = shipped
    found = sentence_attention(model, tokenizer, "Zwei Hunde spielen im Schnee.")
    fig = plot_heads(found.weights["cross"], found.read, found.source, "cross", produced=found.produced)
    assert len([ax for ax in fig.axes if ax.get_label() != "<colorbar>"]) == 3 * 8
    first = fig.axes[0]
    assert [t.get_text() for t in first.get_yticklabels()] == found.read
    assert [t.get_text() for t in fig.axes[-1].get_xticklabels()] == found.source
    with pytest.raises(ValueError, match="row labels"):
        plot_attention(first, found.weights["cross"][0, 0], found.read[:-1], found.source)


def test_the_interactive_view_redraws_for_every_control(shipped):
    from annotated.support.attention_figures import attention_explorer

    model, tokenizer = shipped
    view = attention_explorer(model, tokenizer, ["Zwei Hunde spielen im Schnee."])
    controls = view.controls
    for kind in ("encoder", "decoder", "cross"):
        controls["kind"].value = kind
        for head in (0, 8):
            controls["head"].value = head
    controls["layer"].value = 1
    controls["sentence"].value = "Ein Mann fährt Fahrrad."  # a sentence the reader types
    controls["sentence"].value = "   "  # nothing to draw: no error
    assert set(view.found) == {"Zwei Hunde spielen im Schnee.", "Ein Mann fährt Fahrrad."}
    found = view.found["Ein Mann fährt Fahrrad."]
    assert tokenizer.detokenize(found.produced[:-1]) == "a man rides a bicycle."


def test_the_head_importance_record_is_the_shipped_models_and_follows_its_own_rules():
    """benchmarks/results/head_importance.json, which notebook 12 plots: recorded for the shipped
    weights, heads ranked by their loss increase, and the 0.5-BLEU answer read off its own curve."""
    import json

    from annotated.support.course import ROOT
    from annotated.support.pretrained import PRETRAINED_DIR, sha256

    record = json.loads((ROOT / "benchmarks/results/head_importance.json").read_text())
    assert record["model_sha256"] == sha256(PRETRAINED_DIR / "model.safetensors")
    delta = {tuple(d["head"]): d["delta"] for d in record["delta_val_loss"]}
    assert len(delta) == 72 and sorted(delta) == sorted(tuple(hd) for hd in record["ranking"])
    ranked = [delta[tuple(hd)] for hd in record["ranking"]]
    assert ranked == sorted(ranked, reverse=True)
    curve = sorted(record["pruning"], key=lambda p: -p["heads_kept"])
    assert curve[0] == {"heads_kept": 72, "val_bleu": record["base_val_bleu"]} and curve[-1]["heads_kept"] == 0
    kept = 72
    for point in curve:
        if point["val_bleu"] <= record["base_val_bleu"] - 0.5:
            break
        kept = point["heads_kept"]
    assert kept == record["fewest_heads_within_0.5_bleu"]
    assert [t["head"] for t in record["top_heads_alone"]] == record["ranking"][: len(record["top_heads_alone"])]


def test_to_words_names_pieces_that_do_not_fit_the_weights():
    weights = torch.full((1, 3, 3), 1 / 3)
    with pytest.raises(ValueError, match=r"weights of shape \(1, 3, 3\) do not fit 2 query pieces and 3 key pieces"):
        to_words(weights, ["ein@@", "mann"], ["ein@@", "mann", "."])
    with pytest.raises(ValueError, match="query_pieces is empty"):
        to_words(weights, [], ["a", "b", "c"])
