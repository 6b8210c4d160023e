"""The references of the declared checks of notebooks 07 and 09 agree, on every probe, with what they
stand for: the decoder layer's forward pass with nn.TransformerDecoderLayer holding the same weights, the
parameter count by formula with the parameters of the model make_model builds (and its
stacks with nn.Transformer's). That the grader, judging a kernel's record, finds each known mistake as
the notebook does is tested for every declaration in test_declarations.py."""

import dataclasses

import torch

from annotated.model import count_parameters, make_model
from annotated.support import record
from annotated.support.grading import model
from annotated.support.reference import torch_reference


@torch.no_grad()
def _pytorchs_layer(ours) -> torch.nn.TransformerDecoderLayer:
    """nn.TransformerDecoderLayer holding the weights of the course's layer ``ours`` (no dropout)."""
    attn, ff = ours.self_attn, ours.feed_forward
    theirs = torch.nn.TransformerDecoderLayer(attn.d_model, attn.h, ff.W_1.out_features, dropout=0.0, batch_first=True,
                                              norm_first=ours.sublayer[0].norm_first).to(ff.W_1.weight.dtype).eval()
    for mine, its in ((ours.self_attn, theirs.self_attn), (ours.src_attn, theirs.multihead_attn)):
        its.in_proj_weight.copy_(torch.cat([mine.W_Q.weight, mine.W_K.weight, mine.W_V.weight]))
        its.in_proj_bias.copy_(torch.cat([mine.W_Q.bias, mine.W_K.bias, mine.W_V.bias]))
        its.out_proj.weight.copy_(mine.W_O.weight)
        its.out_proj.bias.copy_(mine.W_O.bias)
    for mine, its in ((ff.W_1, theirs.linear1), (ff.W_2, theirs.linear2)):
        its.weight.copy_(mine.weight)
        its.bias.copy_(mine.bias)
    for sublayer, norm in zip(ours.sublayer, (theirs.norm1, theirs.norm2, theirs.norm3)):
        norm.weight.copy_(sublayer.norm.gamma)
        norm.bias.copy_(sublayer.norm.beta)
        norm.eps = sublayer.norm.eps
    return theirs


def test_the_layer_reference_is_pytorchs_decoder_layer_on_every_probe_without_dropout():
    """Every probe whose dropout does not act (p = 0, or evaluation mode): PyTorch's masks mean the opposite
    (True = may not look), one per head."""
    compared = 0
    for probe in model.LAYER.probes(None):
        layer, x, memory, src_mask, tgt_mask = probe.args
        if layer.training and layer.sublayer[0].dropout.p > 0:
            continue
        h, (batch, L_tgt, _), L_src = layer.self_attn.h, x.shape, memory.size(1)
        with torch.no_grad():
            theirs = _pytorchs_layer(layer)(x, memory, tgt_mask=~tgt_mask.repeat_interleave(h, 0),
                                            memory_mask=~src_mask.expand(batch, L_tgt, L_src).repeat_interleave(h, 0))
            ours = model.course_layer_forward(layer, x, memory, src_mask, tgt_mask)
        torch.testing.assert_close(ours, theirs, msg=probe.label)
        compared += 1
    assert compared == len(model.LAYER.probes(None)) - 2  # all but the two in training mode with dropout


def test_the_layer_probes_in_training_mode_drop_something():
    for probe in model.LAYER.probes(None):
        layer, *inputs = probe.args
        if layer.training and layer.sublayer[0].dropout.p > 0:
            with torch.no_grad():
                assert not torch.allclose(model.course_layer_forward(layer, *inputs),
                                          model.course_layer_forward(layer.eval(), *inputs)), probe.label


def test_the_count_formula_is_the_parameters_of_the_model_make_model_builds_on_every_probe():
    for probe in model.COUNT.probes(None):
        (c,) = probe.args
        with torch.device("meta"):  # the paper's models too, without their numbers
            built = make_model(c)
            if not c.share_embeddings:  # sharing changes no stack
                stacks = count_parameters(built.encoder) + count_parameters(built.decoder)
                assert stacks == count_parameters(torch_reference(dataclasses.replace(c, dropout=0.0))), probe.label
        assert model.course_parameter_count(c) == count_parameters(built), probe.label


def test_the_config_of_a_count_probe_arrives_in_the_kernel_as_it_was_sent():
    (c,) = model.COUNT.probes(None)[-1].args
    again = record.decode(record.encode(c))
    assert dataclasses.asdict(again) == dataclasses.asdict(c)
