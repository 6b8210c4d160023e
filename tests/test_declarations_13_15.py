"""The references of the declared checks of notebooks 13-15 agree, on every probe, with another
form of the same computation: the band with blocks of ones (torch.kron), Linformer with E = F = I
with PyTorch's attention, the skew with the explicit gather of relative logits, the rotation with
complex numbers and with the course's float32 angles, the count of a row of Table 3 by formula with
the parameters of the model make_variant builds. That the grader, judging a kernel's record, finds
each known mistake as the notebook does is tested for every declaration in test_declarations.py."""

import torch

from annotated.relative_positions import naive_relative_logits
from annotated.rotary import rotate
from annotated.support.grading import cost, positions, variations
from annotated.variations import table3_parameters


def test_the_band_reference_is_blocks_of_ones_on_every_probe():
    for probe in cost.BAND.probes(None):
        n, b = probe.args
        blocks = -(-n // b)
        band = torch.eye(blocks, dtype=torch.long) + torch.diag(torch.ones(blocks - 1, dtype=torch.long), -1)
        expected = torch.kron(band, torch.ones(b, b, dtype=torch.long))[:n, :n].bool()
        assert torch.equal(cost.BAND.reference(n, b), expected), probe.label


def test_linformer_with_e_and_f_the_identity_is_pytorchs_attention():
    probes = [p for p in cost.LINFORMER.probes(None) if "E = F = I" in p.label]
    assert len(probes) == 1
    q, k, v, E, F = probes[0].args
    out, _ = cost.LINFORMER.reference(q, k, v, E, F)
    assert torch.allclose(out, torch.nn.functional.scaled_dot_product_attention(q, k, v), atol=1e-5)


def test_the_skew_is_the_explicit_gather_of_relative_logits_on_and_below_the_diagonal():
    """S_rel = skew(Q E^T) equals q_i . E_(j-i), built with an (L, L, D) gather, on random q and E whose
    product has each probe's shape and dtype."""
    g = torch.Generator().manual_seed(0)
    for probe in positions.SKEW.probes(None):
        qe = probe.args[0]
        L = qe.size(-1)
        q = torch.randn(*qe.shape[:-1], 4, generator=g, dtype=torch.float64).to(qe.dtype)
        E = torch.randn(L, 4, generator=g, dtype=torch.float64).to(qe.dtype)
        causal = torch.ones(L, L, dtype=torch.bool).tril()
        skewed = positions.SKEW.reference(q @ E.T)
        assert torch.allclose(skewed[..., causal], naive_relative_logits(q, E)[..., causal], atol=1e-5), probe.label


def test_the_rotation_reference_is_multiplication_by_complex_numbers_and_the_courses_rotate():
    for probe in positions.ROTATE.probes(None):
        x = probe.args[0]
        L, d = x.shape[-2:]
        angles = torch.arange(L, dtype=torch.float64)[:, None] * 10000.0 ** (-torch.arange(0, d, 2).double() / d)
        z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
        by_complex = torch.view_as_real(z * torch.polar(torch.ones_like(angles), angles)).flatten(-2)
        reference = positions.course_rotate(x)
        assert reference.dtype == x.dtype
        assert torch.allclose(reference.double(), by_complex, atol=1e-6 if x.dtype == torch.float64 else 1e-5)
        # The course's rotate takes float32 angles: within the probe's tolerance, which grows with L.
        assert (rotate(x).double() - reference.double()).abs().max() <= probe.precision, probe.label


def test_the_row_count_formula_is_the_parameters_of_the_model_make_variant_builds_on_every_probe():
    for probe in variations.ROW.probes(None):
        vocab_size, *rest = probe.args
        sizes = dict(zip(("N", "d_model", "d_ff", "h"), rest))
        built = table3_parameters(vocab_size, rest[4] if len(rest) > 4 else None, **sizes)
        assert variations.course_row_parameters(*probe.args) == built, probe.label
