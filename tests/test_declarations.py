"""The declared checks (annotated.support.grading.engine): every known mistake of every
declaration is caught, by itself, with its own message, in the notebook and from the kernel's record as the
grader reads it; the engine's own messages (written once
for every declaration) on a small declaration of its own; and what the grader reads back from a
kernel is data only."""

import io
import math

import pytest
import torch

from annotated.attention import scaled_dot_product_attention
from annotated.masks import subsequent_mask
from annotated.support import record
from annotated.support.grading import DECLARATIONS  # every module's, as the grader knows them
from annotated.support.grading import attention, engine, masking, multi_head, positional, softmax, sublayers
from annotated.support.grading.engine import Declaration, Failure, Items, Mistake, Probe, Tensor

# Where the grader's probes try another device, the tests do too: 'meta', which every machine has.
DEVICE = "meta"


def _wrong_answers():
    """(declaration, mistake, the wrong answer that makes it) for every mistake that has one."""
    for decl in DECLARATIONS.values():
        for mistake in decl.mistakes:
            wrong = mistake.example or mistake.like
            if wrong is not None:
                yield pytest.param(decl, mistake, wrong, id=f"{decl.check}-{mistake.name}")


def test_every_mistake_has_a_wrong_answer_that_makes_it():
    missing = [(d.check, m.name) for d in DECLARATIONS.values() for m in d.mistakes
               if m.example is None and m.like is None]
    assert missing == []


@pytest.mark.parametrize("decl, mistake, wrong", list(_wrong_answers()))
def test_every_known_mistake_is_caught_with_its_own_message(decl, mistake, wrong):
    with pytest.raises(Failure) as caught:
        engine.run(decl, wrong, DEVICE)
    assert caught.value.mistake is mistake, str(caught.value)
    assert caught.value.name == mistake.name


@pytest.mark.parametrize("decl", DECLARATIONS.values(), ids=lambda d: d.check)
def test_every_declaration_passes_its_own_reference_on_every_probe(decl, capsys):
    assert engine.run(decl, decl.reference, DEVICE) == engine.passed_line(decl, decl.reference.__name__)


def test_the_course_look_ahead_mask_is_the_negation_of_nn_transformers():
    for sizes in masking.LOOK_AHEAD_SIZES[:-1]:
        size = sizes["size"]
        theirs = torch.nn.Transformer.generate_square_subsequent_mask(size)
        assert torch.equal(~subsequent_mask(size), theirs == float("-inf"))


def test_the_multi_head_reference_agrees_with_nn_multihead_attention_on_every_probe():
    """The course's module (the reference) and nn.MultiheadAttention holding the same matrices
    (no biases, its masks inverted) give the same output on every probe whose queries all see a
    key (nn.MultiheadAttention gives NaN to a query that sees nothing)."""
    for probe in multi_head.MULTI_HEAD.probes(None):
        query, key, value, W_Q, W_K, W_V, W_O, h, mask = probe.args
        if probe.tags.get("blind") or query.dtype != torch.float32:
            continue
        ours = multi_head.course_multi_head(*probe.args)
        with torch.random.fork_rng(devices=[]):
            theirs = torch.nn.MultiheadAttention(W_Q.size(0), h, bias=False, batch_first=True).eval()
        with torch.no_grad():
            theirs.in_proj_weight.copy_(torch.cat([W_Q.T, W_K.T, W_V.T]))
            theirs.out_proj.weight.copy_(W_O.T)
            options = {}
            if mask is not None:  # (batch or 1, L_q or 1, L_k) -> one per sequence and head
                full = mask.expand(query.size(0), query.size(1), key.size(1))
                options["attn_mask"] = ~full.repeat_interleave(h, dim=0)
            out = theirs(query, key, value, need_weights=False, **options)[0]
        assert torch.allclose(ours, out, atol=1e-4, rtol=1e-4), probe.label
        if probe.tags.get("extreme"):  # each query takes its best key's value
            sign = probe.tags["sign"]
            assert torch.allclose(ours, multi_head.one_hot_output(value, W_V, W_O, mask, sign), atol=1e-4)


def test_the_heads_contributions_add_up_to_the_course_output_projection():
    for probe in multi_head.CONTRIBUTIONS.probes(None):
        heads, W_O = probe.args
        if W_O.size(0) != W_O.size(1):
            continue
        module = multi_head._course_module((W_O.float(),) * 4, heads.size(1))
        with torch.no_grad():
            total = module.W_O(module.merge_heads(heads.float()))
        assert torch.allclose(multi_head.course_contributions(heads, W_O).sum(1).float(), total, atol=1e-5)


# ---------------------------------------------------------------- the engine's own messages


def _scale(x, factor):
    return x * factor


def _probes(device):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4, generator=g)
    return [Probe((x, 2.0), "{what} of {name}(x of shape (3, 4), 2.0)", sizes=dict(n=3)),
            Probe((torch.randn(5, 2, generator=g), 3.0), "{what} of {name}(x of shape (5, 2), 3.0)", sizes=dict(n=5)),
            Probe((x.double(), 2.0), "{what} of {name}(x, float64)"),
            Probe((x, 2.0), "{what} of {name}(x)", grad=(0,), again=(x + 1, 2.0))]


SCALE = Declaration(check="check_scale", function="scale", roles=("x", "factor"), reference=_scale,
                    probes=_probes, returns=Tensor("the scaled tensor"), sizes_fix="Read n from x.",
                    mistakes=(Mistake("you added the factor", "added", like=lambda x, f: x + f),),
                    passed="check_scale passed: {name}")
_KEPT = {}


def _not_done(x, factor):
    raise NotImplementedError()


@pytest.mark.parametrize("wrong, message", [
    (_not_done, r"^_not_done raised NotImplementedError: the exercise is not done yet"),
    (lambda x, f: x.mul_(f), r"changed its first argument `x` in place: 12 of its 12 numbers changed"),
    (lambda x, f: None, r"returned None: did you forget the `return` of the scaled tensor"),
    (lambda x, f: [x * f], r"should return the scaled tensor as a tensor, got list of length 1"),
    (lambda x, f: (x * f).to("meta"), r"on the device meta, but the check expects it on the cpu"),
    (lambda x, f: (x * f).to_sparse(), r"as a torch\.sparse_coo tensor; return an ordinary \(dense\) tensor"),
    (lambda x, f: (x * f).long(), r"as a torch\.int64 tensor, an integer one; expected a real floating tensor"),
    (lambda x, f: (x * f).float(), r"as torch\.float32 for torch\.float64 inputs.*A float32 result usually"),
    (lambda x, f: (x.float() * f).to(x.dtype) + (1e-7 * x if x.dtype == torch.float64 else 0),
     r"for float64 inputs, the float64 reference and the scaled tensor of .* differ by up to .*float32's precision"),
    (lambda x, f: (x * f).T, r"wrong shape for the scaled tensor of <lambda>\(x of shape \(3, 4\), 2\.0\): "
                             r"expected \(3, 4\), got \(4, 3\)\."),
    (lambda x, f: (x * f)[None], r"expected \(3, 4\), got \(1, 3, 4\)"),
    (lambda x, f: x + f, r"^you added the factor$"),
    (lambda x, f: x * f + 1, r"mismatch in the scaled tensor of .*, compared with the reference"),
    (lambda x, f: x * f / (x - x), r"contains NaN or inf in 12 of its 12 numbers"),
    (lambda x, f: (x * f).view(3, 4), r"(?s)shape '\[3, 4\]' is invalid.*\nHint: the same function passed with "
                                      r"\(n=3\) but not with \(n=5\)"),
    (lambda x, f: (x * f).detach(), r"without a gradient \(requires_grad is False\)"),
    (lambda x, f: x.detach() * f + 0 * x, r"no gradient reaches x through the scaled tensor"),
    (lambda x, f: _KEPT.setdefault((x.shape, x.dtype), torch.empty_like(x)).copy_(x * f),
     r"a second call of <lambda>, on other inputs, changed the scaled tensor that the first call had returned"),
    (lambda x: x, r"takes 1 positional argument but 2 were given\nHint: the check calls <lambda>\(x, factor\) here"),
])
def test_the_engine_names_what_every_check_shares(wrong, message):
    _KEPT.clear()
    with pytest.raises(Failure, match=message):
        engine.run(SCALE, wrong)


def test_a_module_left_in_another_mode_is_named():
    layer = torch.nn.Dropout(0.0)

    def call(module, x):
        module.eval()
        return module(x)

    decl = Declaration(check="check_call", function="call", roles=("module", "x"), reference=lambda m, x: x,
                       probes=lambda device: [Probe((layer.train(), torch.ones(2)), "{what} of {name}")],
                       returns=Tensor("the output", like=1))
    with pytest.raises(Failure, match=r"switched module from training mode to evaluation mode"):
        engine.run(decl, call)


def test_a_tuple_of_the_wrong_length_is_named():
    decl = Declaration(check="check_pair", function="pair", roles=("x",), reference=lambda x: (x, x),
                       probes=lambda device: [Probe((torch.ones(2),), "{what} of {name}")],
                       returns=Items((Tensor("the first"), Tensor("the second")), what="the pair (a, b)"))
    with pytest.raises(Failure, match=r"should return the pair \(a, b\), got a tuple of 3 items \(Tensor, Tensor, "
                                      r"NoneType\)"):
        engine.run(decl, lambda x: (x, x, None))


def test_a_float32_result_for_float64_inputs_fails_even_where_its_rounding_lands_on_the_reference():
    """A loss computed in float32 for a float64 model can land within float64's tolerance by chance (it did,
    on ATen's default code path, in 8.4's check): the dtype says what the numbers cannot."""
    decl = Declaration(check="check_half", function="half", roles=("x",), reference=lambda x: x.sum() / 4,
                       probes=lambda device: [Probe((torch.ones(2, dtype=torch.float64),), "{what} of {name}",
                                                    precision="float64")],
                       returns=Tensor("the sum", like=None, dtypes=("float32", "float64")))
    engine.run(decl, lambda x: x.sum() / 4)  # the float64 answer passes
    with pytest.raises(Failure, match=r"about float32's precision"):
        engine.run(decl, lambda x: x.float().sum() / 4)  # exactly 0.5, in float32


# ---------------------------------------------------------------- the grader's side: data only


def test_a_record_holds_data_only_and_the_grader_judges_it_as_the_notebook_does(tmp_path):
    decl = masking.PADDING
    probes, sent = engine.plan(decl)
    torch.save(sent, tmp_path / "plan.pt")

    def padding_mask(tokens, pad_idx):
        return (tokens == pad_idx).unsqueeze(1)  # inverted

    record.record_file({"padding_mask": padding_mask}, "padding_mask", str(tmp_path / "plan.pt"),
                       str(tmp_path / "out.pt"))
    found = torch.load(tmp_path / "out.pt", weights_only=True)  # no code of the file's runs
    verdict = engine.judge_record(decl, probes, found)
    assert verdict.verdict == "failed" and verdict.mistake == "an inverted mask"
    with pytest.raises(Failure) as in_notebook:
        engine.run(decl, padding_mask, DEVICE)
    assert verdict.diagnosis == str(in_notebook.value)


def test_a_probe_argument_keeps_its_layout_in_memory_on_the_way_to_the_kernel():
    x = torch.arange(24.0).view(2, 3, 4).transpose(1, 2)
    sent = record.decode(record.encode(x))
    assert torch.equal(sent, x) and sent.stride() == x.stride() and not sent.is_contiguous()
    meta = record.decode(record.encode(torch.ones(2, 3, device="meta", dtype=torch.int32)))
    assert meta.device.type == "meta" and meta.shape == (2, 3) and meta.dtype == torch.int32
    buffer = io.BytesIO()
    torch.save({"args": [record.encode(v) for v in (x, 3, None, "meta", torch.float64)]}, buffer)
    buffer.seek(0)
    torch.load(buffer, weights_only=True)


def test_where_a_function_was_defined_is_recorded():
    assert record.origin(subsequent_mask)["module"] == "annotated.masks"
    assert not record.origin(subsequent_mask)["cell"]
    assert record.origin(torch.no_grad()(subsequent_mask))["module"] == "annotated.masks"  # through the decorator
    assert record.origin(math.sqrt)["file"] is None


def test_a_failure_shows_in_a_notebook_as_exercise_failed():
    with pytest.raises(Failure) as caught:
        engine.run(SCALE, lambda x, f: x + f)
    assert caught.value._render_traceback_() == ["ExerciseFailed: you added the factor"]


def test_the_softmax_references_agree_with_torch_softmax_on_every_probe():
    for probe in softmax.STABLE.probes(None):
        x, dim = probe.args
        assert torch.allclose(softmax.STABLE.reference(x, dim), torch.softmax(x, dim=dim), atol=1e-6), probe.label
    for probe in softmax.TEMPERATURE.probes(None):
        x, temperature = probe.args
        if probe.error is None:
            expected = torch.softmax(x / temperature, dim=-1)
            assert torch.allclose(softmax.TEMPERATURE.reference(x, temperature), expected, atol=1e-6), probe.label


def test_the_attention_reference_agrees_with_pytorchs_on_every_probe_where_each_query_sees_a_key():
    """PyTorch gives a query that sees nothing NaN, the course zero weights and a zero output."""
    for decl in (attention.ATTENTION, attention.LOOPS):
        for probe in decl.probes(None):
            if probe.tags.get("blind"):
                continue
            q, k, v, *mask = probe.args
            ours = decl.reference(*probe.args)[0]
            theirs = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask[0] if mask else None)
            assert torch.allclose(ours, theirs, atol=1e-5, rtol=1e-4), probe.label


def test_the_hard_lookup_is_the_limit_of_attention_on_every_probe_without_a_tie():
    for probe in attention.HARD.probes(None):
        if not probe.tags.get("tie"):
            q, k, v = probe.args
            soft = scaled_dot_product_attention(1e6 * q.double(), k.double(), v.double())[0]
            assert torch.allclose(attention.course_hard_lookup(*probe.args).double(), soft, atol=1e-4), probe.label


def test_a_source_mistake_is_found_in_the_code_not_in_its_comments_strings_or_names():
    decl = softmax.STABLE
    assert engine.source_failure(decl, "def f(x, dim):\n    return torch.softmax(x, dim)\n").name == (
        "the library's softmax called")
    for code in ["def softmax(x, dim):  # not torch.softmax(x)\n    return x\n",
                 'def f(x, dim):\n    """softmax(x) by hand"""\n    return stable_softmax(x, dim)\n']:
        assert engine.source_failure(decl, code) is None, code


@pytest.mark.parametrize("decl", DECLARATIONS.values(), ids=lambda d: d.check)
def test_every_declaration_passes_its_own_reference_through_the_graders_record(decl, tmp_path):
    """The grader's path: the probes sent as data, the kernel's recorder (which stops at a first call
    that raises) calling the reference, the record judged here: passed, with no call left out."""
    verdict = judged_from_record(decl, decl.reference, tmp_path)
    assert verdict.verdict == "passed", verdict.diagnosis


def test_the_positional_references_agree_with_the_course_modules_on_every_probe():
    from annotated.positional import Embeddings, PositionalEncoding, sinusoidal_table
    for probe in positional.EMBED.probes(None):
        tokens, weight, start = probe.args
        embed = Embeddings(*weight.shape).to(weight.dtype)
        positions = PositionalEncoding(weight.size(1), dropout=0.0, max_len=start + tokens.size(1))
        with torch.no_grad():
            embed.lut.weight.copy_(weight)
            expected = positions(embed(tokens), start)
        assert torch.allclose(positional.course_embed(*probe.args), expected, atol=1e-6), probe.label
    for probe in positional.SHIFT.probes(None):  # M_k moves every row of the course's table k positions on
        k, d_model = probe.args
        table, first = sinusoidal_table(abs(k) + 20, d_model).double(), max(0, -k)
        moved = table[first: first + 20] @ positional.course_shift_matrix(k, d_model).T
        assert torch.allclose(moved, table[first + k: first + k + 20], atol=1e-4), probe.label


def test_the_layer_norm_reference_is_the_course_layer_norm_on_every_probe():
    from annotated.layer_norm import LayerNorm
    for probe in sublayers.NORM.probes(None):
        x, gamma, beta, eps = probe.args
        course = LayerNorm(x.size(-1), eps).to(x.dtype)
        with torch.no_grad():
            course.gamma.copy_(gamma)
            course.beta.copy_(beta)
            expected = course(x)
        assert torch.allclose(sublayers.NORM.reference(*probe.args), expected, atol=2e-4), probe.label


def judged_from_record(decl: Declaration, fn, tmp_path) -> engine.Verdict:
    """The grader's path for ``fn``: the probes sent as data, the kernel's recorder calling it, the record
    read back with weights_only and judged here."""
    probes, plan = engine.plan(decl)
    torch.save(plan, tmp_path / "plan.pt")
    record.record_file({decl.function: fn}, decl.function, str(tmp_path / "plan.pt"), str(tmp_path / "out.pt"))
    return engine.judge_record(decl, probes, torch.load(tmp_path / "out.pt", weights_only=True))


@pytest.mark.parametrize("decl, mistake, wrong", list(_wrong_answers()))
def test_the_grader_judges_each_known_mistake_from_the_kernels_record_as_the_notebook_does(decl, mistake, wrong,
                                                                                            tmp_path):
    verdict = judged_from_record(decl, wrong, tmp_path)
    with pytest.raises(engine.Failure) as in_notebook:
        engine.run(decl, wrong, engine.GRADER_DEVICE)
    assert (verdict.verdict, verdict.mistake, verdict.diagnosis) == ("failed", mistake.name, str(in_notebook.value))
