"""Notebook 06's checks: each passes on the course's code and names the mistake of a typical
wrong answer (the feed-forward network, layer norm, the residual connection in both orders)."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from annotated.feed_forward import PositionwiseFeedForward
from annotated.layer_norm import LayerNorm
from annotated.residual import SublayerConnection
from annotated.support.grading import (
    ExerciseFailed,
    check_feed_forward,
    check_layer_norm,
    check_sublayer_connection,
)


# ---------------------------------------------------------------- the course's code, as functions


def course_feed_forward(x, W_1, b_1, W_2, b_2, dropout):
    d_model, d_ff = W_1.shape
    ffn = PositionwiseFeedForward(d_model, d_ff)
    with torch.no_grad():
        ffn.W_1.weight.copy_(W_1.T)  # nn.Linear holds the transpose
        ffn.W_1.bias.copy_(b_1)
        ffn.W_2.weight.copy_(W_2.T)
        ffn.W_2.bias.copy_(b_2)
    ffn.dropout = dropout
    return ffn(x)


def course_layer_norm(x, gamma, beta, eps):
    norm = LayerNorm(x.size(-1), eps)
    with torch.no_grad():
        norm.gamma.copy_(gamma)
        norm.beta.copy_(beta)
    return norm(x)


def torch_layer_norm(x, gamma, beta, eps):
    return F.layer_norm(x, (x.size(-1),), gamma, beta, eps)


def course_sublayer_connection(x, sublayer, norm, dropout, norm_first):
    connection = SublayerConnection(x.size(-1), norm_first=norm_first)
    connection.norm, connection.dropout = norm, dropout
    return connection(x, sublayer)


@pytest.mark.parametrize("check, fn", [
    (check_feed_forward, course_feed_forward),
    (check_layer_norm, course_layer_norm),
    (check_layer_norm, torch_layer_norm),
    (check_sublayer_connection, course_sublayer_connection),
])
def test_check_passes_on_the_course_code(check, fn, capsys):
    check(fn)
    out = capsys.readouterr().out
    assert out.startswith(f"{check.__name__} passed: ") and out.count("\n") == 1


def test_a_check_leaves_the_global_seed_where_it_was(capsys):
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    for check, fn in [(check_sublayer_connection, course_sublayer_connection),
                      (check_feed_forward, course_feed_forward)]:
        check(fn)
    assert torch.equal(torch.rand(3), expected)


def not_done(*args):
    raise NotImplementedError()


# ---------------------------------------------------------------- feed-forward


def _ffn(relu="between", b_1=True, b_2=True, drop="hidden", act=torch.relu):
    """A configurable feed-forward network, for the usual wrong answers in one line each."""
    def feed_forward(x, W_1, b_1_, W_2, b_2_, dropout):
        hidden = x @ W_1 + (b_1_ if b_1 == True else 0)  # noqa: E712 (b_1 may be "after")
        if relu in ("between", "twice"):
            hidden = act(hidden)
        if b_1 == "after":
            hidden = hidden + b_1_
        if drop == "hidden":
            hidden = dropout(hidden)
        elif drop == "twice":
            hidden = dropout(dropout(hidden))
        out = hidden @ W_2 + (b_2_ if b_2 else 0)
        if relu in ("after", "twice"):
            out = torch.relu(out)
        if drop == "output":
            out = dropout(out)
        return out
    return feed_forward


def ffn_with_linear_layout(x, W_1, b_1, W_2, b_2, dropout):
    return dropout(torch.relu(x @ W_1.T + b_1)) @ W_2.T + b_2  # as if nn.Linear's weights


def ffn_dropping_the_input(x, W_1, b_1, W_2, b_2, dropout):
    return torch.relu(dropout(x) @ W_1 + b_1) @ W_2 + b_2


def ffn_with_its_own_dropout(x, W_1, b_1, W_2, b_2, dropout):
    return F.dropout(torch.relu(x @ W_1 + b_1), p=0.1) @ W_2 + b_2


def ffn_mixing_positions(x, W_1, b_1, W_2, b_2, dropout):
    hidden = dropout(torch.relu(x @ W_1 + b_1))
    return (hidden @ W_2 + b_2).cumsum(dim=1)  # each output sums the positions before it


def ffn_hard_coded(x, W_1, b_1, W_2, b_2, dropout):
    flat = x.reshape(-1, 6)  # d_model of the first sizes
    return (dropout(torch.relu(flat @ W_1 + b_1).view(x.size(0), x.size(1), -1)) @ W_2 + b_2)


def ffn_hard_coded_d_ff(x, W_1, b_1, W_2, b_2, dropout):
    hidden = dropout(torch.relu(x @ W_1 + b_1))
    return hidden[..., :10] @ W_2[:10] + b_2  # d_ff of the first sizes


def ffn_in_place(x, W_1, b_1, W_2, b_2, dropout):
    x.clamp_(-3, 3)  # clips the caller's x
    return dropout(torch.relu(x @ W_1 + b_1)) @ W_2 + b_2


# ---------------------------------------------------------------- layer norm


def _norm(dim=-1, unbiased=False, eps_at="inside", affine="right", use_eps=True, centred=True):
    def layer_norm(x, gamma, beta, eps):
        mean = x.mean(dim=dim, keepdim=True) if centred else 0
        var = x.var(dim=dim, keepdim=True, unbiased=unbiased)
        e = eps if use_eps is True else (use_eps or 0.0)
        xhat = (x - mean) / (torch.sqrt(var + e) if eps_at == "inside" else torch.sqrt(var) + e)
        return {"right": gamma * xhat + beta, "none": xhat, "swapped": beta * xhat + gamma,
                "no beta": gamma * xhat}[affine]
    return layer_norm


def norm_rms(x, gamma, beta, eps):
    return gamma * x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps) + beta


def norm_without_keepdim(x, gamma, beta, eps):
    mean, var = x.mean(dim=-1), x.var(dim=-1, unbiased=False)
    return gamma * (x - mean) / torch.sqrt(var + eps) + beta


def norm_dim_2(x, gamma, beta, eps):  # right for (batch, L, d_model) only
    mean, var = x.mean(dim=2, keepdim=True), x.var(dim=2, keepdim=True, unbiased=False)
    return gamma * (x - mean) / torch.sqrt(var + eps) + beta


def norm_dividing_by_8(x, gamma, beta, eps):  # d_model of the first sizes
    mean = x.sum(dim=-1, keepdim=True) / 8
    var = ((x - mean) ** 2).sum(dim=-1, keepdim=True) / 8
    return gamma * (x - mean) / torch.sqrt(var + eps) + beta


def norm_in_place(x, gamma, beta, eps):
    x -= x.mean(dim=-1, keepdim=True)
    return gamma * x / torch.sqrt(x.var(dim=-1, keepdim=True, unbiased=False) + eps) + beta


# ---------------------------------------------------------------- the residual connection


def post(x, sublayer, norm, dropout):
    return norm(x + dropout(sublayer(x)))


def pre(x, sublayer, norm, dropout):
    return x + dropout(sublayer(norm(x)))


def _connection(post_norm=post, pre_norm=pre):
    def sublayer_connection(x, sublayer, norm, dropout, norm_first=False):
        return (pre_norm if norm_first else post_norm)(x, sublayer, norm, dropout)
    return sublayer_connection


def pre_residual_after_norm(x, sublayer, norm, dropout):
    x = norm(x)  # the residual now carries the normalized x
    return x + dropout(sublayer(x))


def pre_norm_twice(x, sublayer, norm, dropout):
    return norm(x + dropout(sublayer(norm(x))))


def pre_dropping_the_sum(x, sublayer, norm, dropout):
    return dropout(x + sublayer(norm(x)))


def pre_dropout_before_sublayer(x, sublayer, norm, dropout):
    return x + sublayer(dropout(norm(x)))


def pre_without_residual(x, sublayer, norm, dropout):
    return dropout(sublayer(norm(x)))


def pre_norm_after_sublayer(x, sublayer, norm, dropout):
    return x + dropout(norm(sublayer(x)))


def post_dropout_after_norm(x, sublayer, norm, dropout):
    return dropout(norm(x + sublayer(x)))


def post_dropping_the_sum(x, sublayer, norm, dropout):
    return norm(dropout(x + sublayer(x)))


def post_norm_on_branch(x, sublayer, norm, dropout):
    return x + norm(dropout(sublayer(x)))


def post_norm_on_x(x, sublayer, norm, dropout):
    return norm(x) + dropout(sublayer(x))


def post_without_residual(x, sublayer, norm, dropout):
    return norm(dropout(sublayer(x)))


def without_norm(x, sublayer, norm, dropout):
    return x + dropout(sublayer(x))


def without_dropout(x, sublayer, norm, dropout):
    return norm(x + sublayer(x))


def with_its_own_norm(x, sublayer, norm, dropout):
    return nn.LayerNorm(x.size(-1))(x + dropout(sublayer(x)))


def calling_the_sublayer_twice(x, sublayer, norm, dropout):
    sublayer(x)  # a look at it first
    return norm(x + dropout(sublayer(x)))


def connection_hard_coded(x, sublayer, norm, dropout, norm_first=False):
    out = pre(x, sublayer, norm, dropout) if norm_first else post(x, sublayer, norm, dropout)
    return out.view(2, 5, 6)  # the shape of the first sizes


def connection_in_place(x, sublayer, norm, dropout, norm_first=False):
    x += dropout(sublayer(norm(x) if norm_first else x))
    return x if norm_first else norm(x)


WRONG_ANSWERS = [
    # (check, wrong answer, what the message must say)
    (check_feed_forward, not_done, r"raised NotImplementedError: the exercise is not done"),
    (check_feed_forward, _ffn(relu="twice"), r"a ReLU after the second layer as well"),
    (check_feed_forward, _ffn(relu="after"), r"ReLU is after the second layer instead"),
    (check_feed_forward, _ffn(relu="none"), r"there is no ReLU.*collapse into one linear map"),
    (check_feed_forward, _ffn(act=F.gelu), r"you used GELU"),
    (check_feed_forward, _ffn(b_1=False), r"b_1 is missing"),
    (check_feed_forward, _ffn(b_2=False), r"b_2 is missing"),
    (check_feed_forward, _ffn(b_1=False, b_2=False), r"both biases are missing"),
    (check_feed_forward, _ffn(b_1="after"), r"b_1 is added after the ReLU"),
    (check_feed_forward, _ffn(drop="none"), r"never called the dropout it was given"),
    (check_feed_forward, ffn_with_its_own_dropout, r"never called the dropout it was given"),
    (check_feed_forward, _ffn(drop="output"),
     r"dropout was applied to a tensor of width d_model = 6, after the second layer"),
    (check_feed_forward, _ffn(drop="twice"), r"called dropout 2 times"),
    (check_feed_forward, ffn_dropping_the_input, r"dropout was applied to the input x"),
    (check_feed_forward, ffn_with_linear_layout,
     r"(?s)raised RuntimeError.*W_1 is \(d_model, d_ff\).*no \.T"),
    (check_feed_forward, ffn_mixing_positions, r"your network mixes positions"),
    (check_feed_forward, ffn_hard_coded,
     r"fixed shape \[-1, 6\].*size written into your code"),
    (check_feed_forward, ffn_hard_coded_d_ff,
     r"passed with \(batch=2, L=3, d_model=6, d_ff=10\) but not with \(batch=4, L=5, d_model=8, "
     r"d_ff=12\)"),
    (check_feed_forward, ffn_in_place, r"changed its first argument `x` in place"),
    (check_layer_norm, not_done, r"raised NotImplementedError: the exercise is not done"),
    (check_layer_norm, _norm(unbiased=True),
     r"^you used the unbiased variance \(dividing by d_model - 1"),
    (check_layer_norm, _norm(eps_at="outside"), r"^eps is outside the square root, std \+ eps"),
    (check_layer_norm, _norm(unbiased=True, eps_at="outside"),
     r"^2 mistakes at once: you used the unbiased variance.*; and eps is outside the square root"),
    (check_layer_norm, _norm(affine="none"), r"^gamma and beta are missing"),
    (check_layer_norm, _norm(affine="no beta"), r"^beta is missing"),
    (check_layer_norm, _norm(affine="swapped"), r"^gamma and beta are swapped"),
    (check_layer_norm, _norm(dim=1),
     r"normalized over the positions \(dim=1\).*the last dimension"),
    (check_layer_norm, _norm(dim=0), r"normalized over the batch \(dim=0\)"),
    (check_layer_norm, _norm(dim=(-2, -1)), r"normalized over each whole sentence"),
    (check_layer_norm, _norm(use_eps=False), r"constant position .* gives NaN: 0 / 0"),
    (check_layer_norm, _norm(use_eps=1e-5),
     r"with eps=0\.5 your function gives what it gave with eps=1e-5: the eps argument is ignored"),
    (check_layer_norm, _norm(centred=False), r"the mean is not subtracted"),
    (check_layer_norm, norm_rms, r"that is RMS norm"),
    (check_layer_norm, norm_without_keepdim, r"(?s)must match the size.*keepdim=True"),
    (check_layer_norm, norm_dim_2,
     r"(?s)raised IndexError.*works for \(batch, L, d_model\) inputs but not for a single "
     r"sentence"),
    (check_layer_norm, norm_dividing_by_8,
     r"passed with \(batch=2, L=5, d_model=8\) but not with \(batch=3, L=4, d_model=6\): is a "
     r"size written into your code"),
    (check_layer_norm, norm_in_place, r"changed its first argument `x` in place"),
    (check_sublayer_connection, not_done, r"raised NotImplementedError: the exercise is not done"),
    (check_sublayer_connection, _connection(pre_norm=pre_residual_after_norm),
     r"norm_first=True \(pre-norm.*the residual is added after the norm"),
    (check_sublayer_connection, _connection(pre_norm=pre_norm_twice), r"a second norm at the end"),
    (check_sublayer_connection, _connection(pre_norm=pre_dropping_the_sum),
     r"pre-norm.*dropout is applied to the sum, so it drops parts of the residual"),
    (check_sublayer_connection, _connection(pre_norm=pre_dropout_before_sublayer),
     r"dropout is applied to the sublayer's input"),
    (check_sublayer_connection, _connection(pre_norm=pre_without_residual),
     r"pre-norm.*the residual is missing"),
    (check_sublayer_connection, _connection(pre_norm=pre_norm_after_sublayer),
     r"the norm is applied to the sublayer's output: in pre-norm it comes first"),
    (check_sublayer_connection, _connection(pre_norm=without_norm),
     r"never called the norm it was given: the layer norm forgotten\? Pre-norm normalizes"),
    (check_sublayer_connection, _connection(post_norm=without_norm),
     r"never called the norm it was given: the layer norm forgotten\? Post-norm normalizes"),
    (check_sublayer_connection, _connection(post_norm=with_its_own_norm),
     r"never called the norm.*Use the norm passed in"),
    (check_sublayer_connection, _connection(post_norm=without_dropout),
     r"never called the dropout it was given.*§5\.4"),
    (check_sublayer_connection, _connection(post_norm=pre, pre_norm=post),
     r"the orders are swapped"),
    (check_sublayer_connection, _connection(pre_norm=post),
     r"norm_first is ignored: your function always computes post-norm"),
    (check_sublayer_connection, _connection(post_norm=pre),
     r"norm_first is ignored: your function always computes pre-norm"),
    (check_sublayer_connection, _connection(post_norm=post_dropout_after_norm),
     r"post-norm.*dropout is applied after the norm"),
    (check_sublayer_connection, _connection(post_norm=post_dropping_the_sum),
     r"post-norm.*dropout is applied to the sum"),
    (check_sublayer_connection, _connection(post_norm=post_norm_on_branch),
     r"the norm is applied to the sublayer's output only"),
    (check_sublayer_connection, _connection(post_norm=post_norm_on_x),
     r"the norm is applied to x only"),
    (check_sublayer_connection, _connection(post_norm=post_without_residual),
     r"post-norm.*the residual is missing: add x before the norm"),
    (check_sublayer_connection, _connection(post_norm=calling_the_sublayer_twice),
     r"called the sublayer 2 times"),
    (check_sublayer_connection, connection_hard_coded,
     r"fixed shape \[2, 5, 6\].*size written into your code"),
    (check_sublayer_connection, connection_in_place, r"changed its first argument `x` in place"),
]


@pytest.mark.parametrize("check, wrong, message", WRONG_ANSWERS,
                         ids=[f"{c.__name__}-{w.__name__}-{i}"
                              for i, (c, w, _) in enumerate(WRONG_ANSWERS)])
def test_check_names_the_mistake_of_a_typical_wrong_answer(check, wrong, message):
    with pytest.raises(ExerciseFailed, match=message):
        check(wrong)


def test_the_layer_norm_check_feeds_a_position_where_eps_inside_or_outside_the_root_differs():
    # sqrt(var + eps) against sqrt(var) + eps at the smallest standard deviation, 0.01: about 5 %.
    var, eps = 0.01**2, 1e-5
    assert math.sqrt(var + eps) / (math.sqrt(var) + eps) > 1.04
