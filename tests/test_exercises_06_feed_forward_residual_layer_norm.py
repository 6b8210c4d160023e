"""Notebook 06's checks: each passes on the course's code and on other right answers (reading
the dropout's p and mode, the norm's attributes), and names the mistake of a typical wrong
answer (the feed-forward network, layer norm, the residual connection in both orders)."""

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
    ffn.dropout = dropout
    # The module run with the given tensors as its parameters (nn.Linear holds the transpose),
    # so that gradients flow back to them and their dtype is kept.
    weights = {"W_1.weight": W_1.T, "W_1.bias": b_1, "W_2.weight": W_2.T, "W_2.bias": b_2}
    return torch.func.functional_call(ffn, weights, (x,))


def course_layer_norm(x, gamma, beta, eps):
    norm = LayerNorm(x.size(-1), eps)
    return torch.func.functional_call(norm, {"gamma": gamma, "beta": beta}, (x,))


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


# ---------------------------------------------------------------- other right answers


def ffn_skipping_a_dropout_of_p_0(x, W_1, b_1, W_2, b_2, dropout):
    hidden = torch.relu(x @ W_1 + b_1)
    if dropout.p > 0:  # reads the module's p
        hidden = dropout(hidden)
    return hidden @ W_2 + b_2


def ffn_reading_the_mode(x, W_1, b_1, W_2, b_2, dropout):
    assert isinstance(dropout, nn.Dropout) and not dropout.inplace
    hidden = F.relu(F.linear(x, W_1.T, b_1))
    if dropout.training and dropout.p > 0:
        hidden = dropout(hidden)
    return torch.einsum("blf,fd->bld", hidden, W_2) + b_2


def ffn_with_the_modules_settings(x, W_1, b_1, W_2, b_2, dropout):
    hidden = F.dropout(torch.relu(x @ W_1 + b_1), dropout.p, dropout.training)
    return hidden @ W_2 + b_2


def ffn_in_place_on_its_own_tensors(x, W_1, b_1, W_2, b_2, dropout):
    hidden = x @ W_1
    hidden += b_1
    hidden.relu_()
    out = dropout(hidden) @ W_2
    out += b_2
    return out


def ffn_flattening_the_positions(x, W_1, b_1, W_2, b_2, dropout):
    # "Position-wise": the positions as rows of one (batch * L, d_model) matrix, then back.
    d_model = x.size(-1)
    hidden = dropout(F.relu(torch.addmm(b_1, x.reshape(-1, d_model), W_1)))  # (batch * L, d_ff)
    return torch.addmm(b_2, hidden, W_2).view(*x.shape[:-1], -1)


def ffn_flattening_with_the_modules_settings(x, W_1, b_1, W_2, b_2, dropout):
    flat = x.reshape(-1, x.size(-1))
    hidden = F.dropout(torch.relu(flat @ W_1 + b_1), dropout.p, dropout.training)
    return (hidden @ W_2 + b_2).view(*x.shape[:-1], -1)


def norm_position_by_position(x, gamma, beta, eps):
    rows = [gamma * (r - r.mean()) / torch.sqrt(((r - r.mean()) ** 2).mean() + eps) + beta
            for r in x.reshape(-1, x.size(-1))]
    return torch.stack(rows).reshape(x.shape)


def norm_with_rsqrt(x, gamma, beta, eps):
    centred = x - x.mean(dim=-1, keepdim=True)
    return centred * torch.rsqrt((centred * centred).mean(dim=-1, keepdim=True) + eps) * gamma + beta


def norm_with_var_mean(x, gamma, beta, eps):
    var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
    return torch.addcmul(beta, gamma, (x - mean) / (var + eps).sqrt())


def connection_in_place_on_its_own_tensors(x, sublayer, norm, dropout, norm_first=False):
    out = dropout(sublayer.forward(norm.forward(x) if norm_first else x))
    out += x
    return out if norm_first else norm(out)


def connection_skipping_a_dropout_of_p_0(x, sublayer, norm, dropout, norm_first=False):
    out = sublayer(norm(x) if norm_first else x)
    if dropout.p > 0:
        out = dropout(out)
    return x + out if norm_first else norm(x + out)


def connection_from_the_norms_attributes(x, sublayer, norm, dropout, norm_first=False):
    def normalize(t):
        return F.layer_norm(t, norm.normalized_shape, norm.weight, norm.bias, norm.eps)
    out = dropout(sublayer(normalize(x) if norm_first else x))
    return x + out if norm_first else normalize(x + out)


def connection_from_gamma_and_beta(x, sublayer, norm, dropout, norm_first=False):
    def normalize(t):  # exercise 6.2's function with the norm's parameters
        return course_layer_norm(t, norm.gamma, norm.beta, norm.eps)
    out = dropout(sublayer(normalize(x) if norm_first else x))
    return x + out if norm_first else normalize(x + out)


def connection_with_the_modules_settings(x, sublayer, norm, dropout, norm_first=False):
    out = F.dropout(sublayer(norm(x) if norm_first else x), dropout.p, dropout.training)
    return x + out if norm_first else norm(x + out)


def connection_putting_the_mode_back(x, sublayer, norm, dropout, norm_first=False):
    was = sublayer.training
    sublayer.eval()  # its own dropout off, then the caller's mode restored
    out = dropout(sublayer(norm(x) if norm_first else x))
    sublayer.train(was)
    return x + out if norm_first else norm(x + out)


@pytest.mark.parametrize("check, fn", [
    (check_feed_forward, ffn_skipping_a_dropout_of_p_0),
    (check_feed_forward, ffn_reading_the_mode),
    (check_feed_forward, ffn_with_the_modules_settings),
    (check_feed_forward, ffn_in_place_on_its_own_tensors),
    (check_feed_forward, ffn_flattening_the_positions),
    (check_feed_forward, ffn_flattening_with_the_modules_settings),
    (check_layer_norm, norm_position_by_position),
    (check_layer_norm, norm_with_rsqrt),
    (check_layer_norm, norm_with_var_mean),
    (check_sublayer_connection, connection_skipping_a_dropout_of_p_0),
    (check_sublayer_connection, connection_in_place_on_its_own_tensors),
    (check_sublayer_connection, connection_from_the_norms_attributes),
    (check_sublayer_connection, connection_from_gamma_and_beta),
    (check_sublayer_connection, connection_with_the_modules_settings),
    (check_sublayer_connection, connection_putting_the_mode_back),
], ids=lambda v: getattr(v, "__name__", None))
def test_check_passes_on_other_right_answers(check, fn, capsys):
    check(fn)
    out = capsys.readouterr().out
    assert out.startswith(f"{check.__name__} passed: ") and out.count("\n") == 1


def test_the_modules_a_learner_gets_are_the_real_classes_with_their_attributes(capsys):
    seen = {}

    def ffn_spy(x, W_1, b_1, W_2, b_2, dropout):
        seen["dropout"] = (isinstance(dropout, nn.Dropout), dropout.p, dropout.inplace, repr(dropout))
        return course_feed_forward(x, W_1, b_1, W_2, b_2, dropout)

    def connection_spy(x, sublayer, norm, dropout, norm_first=False):
        seen["norm"] = (isinstance(norm, nn.LayerNorm), norm.normalized_shape, norm.eps,
                        norm.gamma is norm.weight and norm.beta is norm.bias, repr(norm))
        seen["sublayer"] = isinstance(sublayer, PositionwiseFeedForward)
        return course_sublayer_connection(x, sublayer, norm, dropout, norm_first)

    check_feed_forward(ffn_spy)
    check_sublayer_connection(connection_spy)
    assert seen["dropout"] == (True, 0.25, False, "Dropout(p=0.25, inplace=False)")
    assert seen["norm"][:4] == (True, (6,), 1e-5, True)
    assert seen["norm"][4].startswith("LayerNorm((6,)") and seen["sublayer"]


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


# ---------------------------------------------------------------- one wrong answer per class
# (training mode, gradients, float64, a batch of one, a reused buffer, large offsets, 4-D)


def ffn_in_eval_mode(x, W_1, b_1, W_2, b_2, dropout):
    dropout.eval()  # "to be deterministic", and the caller's dropout stays off
    return dropout(torch.relu(x @ W_1 + b_1)) @ W_2 + b_2


def ffn_with_functional_dropout(x, W_1, b_1, W_2, b_2, dropout):
    return F.dropout(torch.relu(x @ W_1 + b_1), dropout.p) @ W_2 + b_2  # training=True always


@torch.no_grad()
def ffn_without_gradients(x, W_1, b_1, W_2, b_2, dropout):
    return dropout(torch.relu(x @ W_1 + b_1)) @ W_2 + b_2


def ffn_with_a_frozen_W_1(x, W_1, b_1, W_2, b_2, dropout):
    return dropout(torch.relu(x @ W_1.detach() + b_1)) @ W_2 + b_2


def ffn_as_float(x, W_1, b_1, W_2, b_2, dropout):
    x, W_1, b_1, W_2, b_2 = (t.float() for t in (x, W_1, b_1, W_2, b_2))  # "for safety"
    return dropout(torch.relu(x @ W_1 + b_1)) @ W_2 + b_2


def ffn_into_zeros(x, W_1, b_1, W_2, b_2, dropout):
    out = torch.zeros(x.shape)  # float32 whatever x's dtype
    out += dropout(torch.relu(x @ W_1 + b_1)) @ W_2 + b_2
    return out


def ffn_squeezed(x, W_1, b_1, W_2, b_2, dropout):
    return dropout(torch.relu(x.squeeze() @ W_1 + b_1)) @ W_2 + b_2


_BUFFERS = {}


def _buffer(like):
    key = (tuple(like.shape), like.dtype)
    if key not in _BUFFERS:
        _BUFFERS[key] = torch.empty(like.shape, dtype=like.dtype)
    return _BUFFERS[key]


def ffn_in_a_reused_buffer(x, W_1, b_1, W_2, b_2, dropout):
    out = _buffer(x)  # one buffer per shape, reused by the next call
    out.copy_(dropout(torch.relu(x @ W_1 + b_1)) @ W_2 + b_2)
    return out


def norm_in_one_pass(x, gamma, beta, eps):
    mean = x.mean(dim=-1, keepdim=True)
    var = (x * x).mean(dim=-1, keepdim=True) - mean * mean  # E[x^2] - E[x]^2
    return gamma * (x - mean) / torch.sqrt(var + eps) + beta


def norm_in_one_pass_clamped(x, gamma, beta, eps):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x**2).mean(dim=-1, keepdim=True) - mean**2).clamp(min=0)
    return gamma * (x - mean) / torch.sqrt(var + eps) + beta


def norm_as_float(x, gamma, beta, eps):
    return _norm()(x.float(), gamma.float(), beta.float(), eps)


def norm_as_float_and_back(x, gamma, beta, eps):
    return _norm()(x.float(), gamma.float(), beta.float(), eps).to(x.dtype)


def norm_squeezed(x, gamma, beta, eps):
    return _norm()(x.squeeze(), gamma, beta, eps)


def norm_for_3_or_2_dimensions(x, gamma, beta, eps):
    d_model = x.size(2) if x.dim() == 3 else x.size(1)
    mean = x.sum(dim=-1, keepdim=True) / d_model
    var = ((x - mean) ** 2).sum(dim=-1, keepdim=True) / d_model
    return gamma * (x - mean) / torch.sqrt(var + eps) + beta


def norm_dividing_in_place(x, gamma, beta, eps):
    centred = x - x.mean(dim=-1, keepdim=True)
    centred /= torch.sqrt((centred**2).mean(dim=-1, keepdim=True) + eps)  # needed by backward
    return gamma * centred + beta


@torch.no_grad()
def norm_without_gradients(x, gamma, beta, eps):
    return _norm()(x, gamma, beta, eps)


def norm_in_a_reused_buffer(x, gamma, beta, eps):
    out = _buffer(x)
    out.copy_(_norm()(x, gamma, beta, eps))
    return out


def connection_in_eval_mode(x, sublayer, norm, dropout, norm_first=False):
    dropout.eval()
    return (pre if norm_first else post)(x, sublayer, norm, dropout)


def connection_with_the_sublayer_in_eval_mode(x, sublayer, norm, dropout, norm_first=False):
    sublayer.eval()  # left there
    return (pre if norm_first else post)(x, sublayer, norm, dropout)


def connection_with_functional_dropout(x, sublayer, norm, dropout, norm_first=False):
    out = F.dropout(sublayer(norm(x) if norm_first else x), dropout.p)  # training=True always
    return x + out if norm_first else norm(x + out)


@torch.no_grad()
def connection_without_gradients(x, sublayer, norm, dropout, norm_first=False):
    return (pre if norm_first else post)(x, sublayer, norm, dropout)


def connection_with_a_detached_sublayer(x, sublayer, norm, dropout, norm_first=False):
    out = dropout(sublayer(norm(x) if norm_first else x).detach())
    return x + out if norm_first else norm(x + out)


def connection_as_float(x, sublayer, norm, dropout, norm_first=False):
    return (pre if norm_first else post)(x, sublayer, norm, dropout).float()


def connection_squeezed(x, sublayer, norm, dropout, norm_first=False):
    return (pre if norm_first else post)(x, sublayer, norm, dropout).squeeze()


def connection_in_a_reused_buffer(x, sublayer, norm, dropout, norm_first=False):
    out = _buffer(x)
    out.copy_((pre if norm_first else post)(x, sublayer, norm, dropout))
    return out


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
    # One per class: modes, gradients, dtype, a batch of one, a reused buffer, offsets, 4-D.
    (check_feed_forward, ffn_in_eval_mode,
     r"switched dropout from training mode to evaluation mode and left it there"),
    (check_feed_forward, ffn_with_functional_dropout,
     r"with the dropout in evaluation mode \(dropout\.training is False\) your function still "
     r"drops entries: F\.dropout\(t, p\) drops whatever the mode"),
    (check_feed_forward, ffn_without_gradients,
     r"returned the output without a gradient \(requires_grad is False\).*@torch\.no_grad\(\)"),
    (check_feed_forward, ffn_with_a_frozen_W_1, r"no gradient reaches W_1 through the output"),
    (check_feed_forward, ffn_as_float,
     r"returned the output as torch\.float32 for torch\.float64 inputs.*from a \.float\(\)"),
    (check_feed_forward, ffn_into_zeros, r"as torch\.float32 for torch\.float64 inputs"),
    (check_feed_forward, ffn_squeezed,
     r"expected \(1, 4, 7\), got \(4, 7\)\. Your result lost dimensions of size 1"),
    (check_feed_forward, ffn_in_a_reused_buffer,
     r"a second call of ffn_in_a_reused_buffer, on other inputs, changed the output"),
    (check_layer_norm, norm_in_one_pass,
     r"^for features that share a large offset, 1000 \+ a spread of about 1, your result is off "
     r"by up to .*is the variance computed in one pass"),
    (check_layer_norm, norm_in_one_pass_clamped, r"is the variance computed in one pass"),
    (check_layer_norm, norm_as_float, r"as torch\.float32 for torch\.float64 inputs"),
    (check_layer_norm, norm_as_float_and_back,
     r"differ by up to .*, about float32's precision.*a step computes in float32"),
    (check_layer_norm, norm_squeezed,
     r"expected \(1, 9, 12\), got \(9, 12\)\. Your result lost dimensions of size 1"),
    (check_layer_norm, norm_for_3_or_2_dimensions,
     r"(?s)mismatch in the normalized tensor of norm_for_3_or_2_dimensions\(x of shape \(batch=5, h=2, L=3, d_model=4\).*"
     r"Hint: it works for \(batch, L, d_model\) and \(L, d_model\) inputs but not for "
     r"\(batch, h, L, d_model\)"),
    (check_layer_norm, norm_without_gradients, r"without a gradient \(requires_grad is False\)"),
    (check_layer_norm, norm_dividing_in_place,
     r"the backward pass through the normalized tensor of norm_dividing_in_place fails: a tensor that the "
     r"gradient needs was changed in place"),
    (check_layer_norm, norm_in_a_reused_buffer,
     r"a second call of norm_in_a_reused_buffer, on other inputs, changed the normalized tensor"),
    (check_sublayer_connection, connection_in_eval_mode,
     r"switched dropout from training mode to evaluation mode and left it there"),
    (check_sublayer_connection, connection_with_the_sublayer_in_eval_mode,
     r"switched sublayer from training mode to evaluation mode"),
    (check_sublayer_connection, connection_with_functional_dropout,
     r"dropout\.training is False\) your function still drops entries"),
    (check_sublayer_connection, connection_without_gradients,
     r"without a gradient \(requires_grad is False\)"),
    (check_sublayer_connection, connection_with_a_detached_sublayer,
     r"no gradient reaches the sublayer's W_1\.weight"),
    (check_sublayer_connection, connection_as_float, r"as torch\.float32 for torch\.float64 inputs"),
    (check_sublayer_connection, connection_squeezed,
     r"expected \(1, 7, 8\), got \(7, 8\)\. Your result lost dimensions of size 1"),
    (check_sublayer_connection, connection_in_a_reused_buffer,
     r"a second call of connection_in_a_reused_buffer, on other inputs, changed the output"),
]


@pytest.mark.parametrize("check, wrong, message", WRONG_ANSWERS,
                         ids=[f"{c.__name__}-{w.__name__}-{i}"
                              for i, (c, w, _) in enumerate(WRONG_ANSWERS)])
def test_check_names_the_mistake_of_a_typical_wrong_answer(check, wrong, message):
    with pytest.raises(ExerciseFailed, match=message):
        check(wrong)


def _flattened(feed_forward):
    """``feed_forward`` run on the positions as rows of one (batch * L, d_model) matrix."""
    def flattened(x, W_1, b_1, W_2, b_2, dropout):
        return feed_forward(x.reshape(-1, x.size(-1)), W_1, b_1, W_2, b_2, dropout).view(*x.shape[:-1], -1)
    flattened.__name__ = f"flattened_{feed_forward.__name__}"
    return flattened


@pytest.mark.parametrize("wrong, message", [
    (_ffn(relu="twice"), r"a ReLU after the second layer as well"),
    (_ffn(relu="none"), r"there is no ReLU"),
    (_ffn(b_1=False), r"b_1 is missing"),
    (_ffn(b_1="after"), r"b_1 is added after the ReLU"),
    (_ffn(drop="output"), r"dropout was applied to a tensor of width d_model = 6, after the second layer"),
    (ffn_dropping_the_input, r"dropout was applied to the input x"),
], ids=["relu-twice", "no-relu", "no-b_1", "b_1-after", "dropout-on-output", "dropout-on-input"])
def test_a_network_that_flattens_the_positions_gets_its_mistake_named_too(wrong, message):
    # The stand-in dropout zeroes the same entries of a (batch * L, d_ff) hidden layer as of a
    # (batch, L, d_ff) one, so flattening is accepted and the usual mistakes are still named.
    with pytest.raises(ExerciseFailed, match=message):
        check_feed_forward(_flattened(wrong))


def test_the_layer_norm_check_feeds_a_position_where_eps_inside_or_outside_the_root_differs():
    # sqrt(var + eps) against sqrt(var) + eps at the smallest standard deviation, 0.01: about 5 %.
    var, eps = 0.01**2, 1e-5
    assert math.sqrt(var + eps) / (math.sqrt(var) + eps) > 1.04
