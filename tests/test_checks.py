import pytest
import torch

from annotated.masks import padding_mask, subsequent_mask, target_mask
from annotated.multi_head import MultiHeadAttention
from annotated.support.checks import accepted_mask_shape, check_attention_inputs, check_mask_shape


def test_accepted_shape_lists_every_leading_size_or_one():
    assert accepted_mask_shape(torch.Size([2, 8, 5, 7])) == "(2 or 1, 8 or 1, 5 or 1, 7)"
    assert accepted_mask_shape(torch.Size([3, 4, 6])) == "(3 or 1, 4 or 1, 6)"


@pytest.mark.parametrize("shape", [(2, 5, 7), (1, 5, 7), (2, 1, 7), (1, 1, 7)])
def test_masks_of_the_scores_rank_are_accepted(shape):
    check_mask_shape(torch.ones(shape, dtype=torch.bool), torch.Size([2, 5, 7]))


@pytest.mark.parametrize("shape", [(7,), (5, 7), (2, 7), (1, 2, 5, 7), (3, 5, 7), (2, 5, 1), (2, 5, 8)])
def test_other_mask_shapes_are_refused(shape):
    with pytest.raises(ValueError, match=r"\(2 or 1, 5 or 1, 7\).*unsqueeze\(1\) a \(batch, L_k\) padding mask"):
        check_mask_shape(torch.ones(shape, dtype=torch.bool), torch.Size([2, 5, 7]))


def test_attention_inputs_that_do_not_broadcast_are_refused():
    with pytest.raises(ValueError, match="do not broadcast"):
        check_attention_inputs(torch.randn(2, 3, 4), torch.randn(3, 5, 4), torch.randn(3, 5, 4))
    with pytest.raises(ValueError, match="at least two dimensions"):
        check_attention_inputs(torch.randn(4), torch.randn(5, 4), torch.randn(5, 4))


@pytest.mark.parametrize("fast", [True, False])
def test_multi_head_refuses_a_padding_mask_without_query_axis_when_batch_equals_l_q(fast):
    batch = L_q = 4
    attn = MultiHeadAttention(d_model=12, h=3, fast=fast).eval()
    tokens = torch.tensor([[5, 6, 7, 8, 9, 3], [5, 6, 7, 0, 0, 0], [5, 0, 0, 0, 0, 0], [5, 6, 0, 0, 0, 0]])
    x, memory = torch.randn(batch, L_q, 12), torch.randn(batch, 6, 12)
    keys = tokens != 0  # (batch, L_k): would broadcast against (batch, L_q, L_k) since batch == L_q
    with pytest.raises(ValueError, match=r"mask of shape \(4, 6\) has 2 dimensions.*unsqueeze\(1\)"):
        attn(x, memory, memory, keys)
    out = attn(x, memory, memory, padding_mask(tokens, 0))  # (batch, 1, L_k): accepted
    assert out.shape == (batch, L_q, 12)


@pytest.mark.parametrize("fast", [True, False])
def test_multi_head_refuses_a_two_dimensional_causal_mask(fast):
    attn = MultiHeadAttention(d_model=12, h=3, fast=fast).eval()
    x = torch.randn(2, 5, 12)
    with pytest.raises(ValueError, match=r"mask of shape \(5, 5\) has 2 dimensions.*unsqueeze\(0\)"):
        attn(x, x, x, subsequent_mask(5))
    torch.testing.assert_close(attn(x, x, x, subsequent_mask(5).unsqueeze(0)),
                               attn(x, x, x, target_mask(torch.ones(2, 5, dtype=torch.long), 0)))


# The checks written for the taught code that does not call them yet (MultiHeadAttention.forward and
# heads.to_words: the proposed one-line changes are in their notebooks' hands).


def test_check_multi_head_inputs_names_a_missing_batch_axis():
    from annotated.support.checks import check_multi_head_inputs

    x = torch.randn(5, 8)  # (L, d_model): MultiHeadAttention ends in "not enough values to unpack"
    with pytest.raises(ValueError, match=r"query of shape \(5, 8\) is not \(batch, L, d_model=8\); one sequence "
                                         r"needs unsqueeze\(0\)"):
        check_multi_head_inputs(x, x, x, 8)
    with pytest.raises(ValueError, match="must share the batch size"):
        check_multi_head_inputs(torch.randn(2, 5, 8), torch.randn(3, 5, 8), torch.randn(3, 5, 8), 8)
    check_multi_head_inputs(x[None], x[None], x[None], 8)


def test_check_pieces_names_shapes_that_do_not_fit_and_empty_pieces():
    from annotated.support.checks import check_pieces

    with pytest.raises(ValueError, match=r"weights of shape \(3, 4\) do not fit 2 query pieces and 4 key pieces"):
        check_pieces(torch.rand(3, 4), ["a", "b"], ["c", "d", "e", "f"])
    with pytest.raises(ValueError, match="query_pieces is empty"):
        check_pieces(torch.rand(0, 0), [], [])
    with pytest.raises(TypeError, match="key_pieces must be a list of byte-pair pieces, got a single string"):
        check_pieces(torch.rand(2, 3), ["a", "b"], "abc")
    check_pieces(torch.rand(2, 2, 3), ["a", "b"], ["c@@", "d", "e"])


def test_a_checked_function_runs_its_check_first_and_unwraps_to_the_plain_function():
    import inspect

    from annotated.positional import sinusoidal_table
    from annotated.support.class_guards import checked

    seen = []

    def add(a: int, b: int = 2) -> int:
        return a + b

    def check(a, b):
        seen.append((a, b))
        if a < 0:
            raise ValueError(f"a must be >= 0, got {a}")

    guarded = checked(add, check)
    assert guarded(1) == 3 and seen == [(1, 2)]  # the check gets every argument by name, defaults included
    with pytest.raises(ValueError, match="a must be >= 0, got -1"):
        guarded(-1, b=5)
    assert inspect.unwrap(guarded) is add and inspect.signature(guarded) == inspect.signature(add)
    # The package's sinusoidal_table is guarded; the plain one, as notebook 05 teaches it, gives the same table.
    plain = inspect.unwrap(sinusoidal_table)
    assert plain is not sinusoidal_table and torch.equal(plain(7, 6), sinusoidal_table(7, 6))
    with pytest.raises(ValueError, match="d_model=5 must be even"):
        sinusoidal_table(7, 5)


@pytest.mark.parametrize("module, guarded", [
    ("annotated.positional", ["sinusoidal_table", "PositionalEncoding.forward", "Embeddings.forward"]),
    ("annotated.feed_forward", ["PositionwiseFeedForward.__init__"]),
    ("annotated.layer_norm", ["LayerNorm.__init__", "LayerNorm.forward"]),
    ("annotated.model", ["TransformerConfig.__init__", "make_model"]),
    ("annotated.multi_head", ["MultiHeadAttention.__init__", "MultiHeadAttention.forward"]),
])
def test_the_taught_code_holds_no_guard_and_the_package_attaches_one(module, guarded):
    # The notebooks show the plain code; the package wraps it with its input checks (class_guards).
    import importlib
    import inspect

    m = importlib.import_module(module)
    for name in guarded:
        obj = m
        for part in name.split("."):
            obj = getattr(obj, part)
        assert obj is not inspect.unwrap(obj), f"{module}.{name} has no guard attached"
        try:
            source = inspect.getsource(inspect.unwrap(obj))
        except OSError:  # a dataclass's generated __init__ has no source, and no check
            continue
        assert "check_" not in source, f"{module}.{name} holds a check itself"
