"""The checks of notebook 07's exercises pass on the course's own code and name the mistake of
each typical wrong answer: the decoder layer's forward pass, the tied embeddings and generator,
and the parameter count."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from annotated.masks import subsequent_mask
from annotated.model import DecoderLayer, Generator, TransformerConfig, count_parameters, make_model
from annotated.positional import Embeddings, PositionalEncoding
from annotated.support.grading import (
    ExerciseFailed,
    check_decoder_layer_forward,
    check_parameter_count,
    check_tied_embeddings,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny layers: one thread is faster


def not_done(*args):
    raise NotImplementedError()


# ---------------------------------------------------------------- the decoder layer


def _layer(self_qkv="y y y", self_mask="tgt", cross_qkv="y memory memory", cross_mask="src",
           order=("self", "cross", "ff"), wrap=(0, 1, 2)):
    """A configurable decoder layer forward, to write the usual wrong answers in one line each:
    the attentions' inputs by name, their masks, the order of the sublayers and which
    connection wraps each."""
    def forward(layer, x, memory, src_mask, tgt_mask):
        masks = {"tgt": tgt_mask, "src": src_mask, "none": None}
        inputs = lambda y: {"y": y, "memory": memory, "x": x}  # noqa: E731
        steps = {
            "self": lambda y: layer.self_attn(*(inputs(y)[n] for n in self_qkv.split()),
                                              masks[self_mask]),
            "cross": lambda y: layer.src_attn(*(inputs(y)[n] for n in cross_qkv.split()),
                                              masks[cross_mask]),
            "ff": layer.feed_forward,
        }
        for step, index in zip(order, wrap):
            x = layer.sublayer[index](x, steps[step])
        return x
    return forward


def layer_with_self_attn_twice(layer, x, memory, src_mask, tgt_mask):
    x = layer.sublayer[0](x, lambda y: layer.self_attn(y, y, y, tgt_mask))
    x = layer.sublayer[1](x, lambda y: layer.self_attn(y, memory, memory, src_mask))
    return layer.sublayer[2](x, layer.feed_forward)


def layer_with_the_attentions_swapped(layer, x, memory, src_mask, tgt_mask):
    x = layer.sublayer[0](x, lambda y: layer.src_attn(y, y, y, tgt_mask))
    x = layer.sublayer[1](x, lambda y: layer.self_attn(y, memory, memory, src_mask))
    return layer.sublayer[2](x, layer.feed_forward)


def layer_without_connections(layer, x, memory, src_mask, tgt_mask):
    x = x + layer.self_attn(x, x, x, tgt_mask)
    x = x + layer.src_attn(x, memory, memory, src_mask)
    return x + layer.feed_forward(x)


def layer_with_post_norm_by_hand(layer, x, memory, src_mask, tgt_mask):
    x = layer.sublayer[0].norm(x + layer.self_attn(x, x, x, tgt_mask))
    x = layer.sublayer[1].norm(x + layer.src_attn(x, memory, memory, src_mask))
    return layer.sublayer[2].norm(x + layer.feed_forward(x))


def layer_feeding_x_to_every_sublayer(layer, x, memory, src_mask, tgt_mask):
    _ = layer.sublayer[0](x, lambda y: layer.self_attn(y, y, y, tgt_mask))
    out = layer.sublayer[1](x, lambda y: layer.src_attn(y, memory, memory, src_mask))
    return layer.sublayer[2](out, layer.feed_forward)


def layer_adding_the_residual_twice(layer, x, memory, src_mask, tgt_mask):
    x = x + layer.sublayer[0](x, lambda y: layer.self_attn(y, y, y, tgt_mask))
    x = layer.sublayer[1](x, lambda y: layer.src_attn(y, memory, memory, src_mask))
    return layer.sublayer[2](x, layer.feed_forward)


def layer_calling_itself(layer, x, memory, src_mask, tgt_mask):
    return layer(x, memory, src_mask, tgt_mask)


def layer_with_its_own_causal_mask(layer, x, memory, src_mask, tgt_mask):
    causal = subsequent_mask(x.size(1)).unsqueeze(0)  # forgets the target's padding
    x = layer.sublayer[0](x, lambda y: layer.self_attn(y, y, y, causal))
    x = layer.sublayer[1](x, lambda y: layer.src_attn(y, memory, memory, src_mask))
    return layer.sublayer[2](x, layer.feed_forward)


def layer_normalizing_the_memory(layer, x, memory, src_mask, tgt_mask):
    m = layer.sublayer[1].norm(memory)
    x = layer.sublayer[0](x, lambda y: layer.self_attn(y, y, y, tgt_mask))
    x = layer.sublayer[1](x, lambda y: layer.src_attn(y, m, m, src_mask))
    return layer.sublayer[2](x, layer.feed_forward)


def layer_with_a_hard_coded_shape(layer, x, memory, src_mask, tgt_mask):
    memory = memory.reshape(3, 7, 12)  # the first sizes the check runs
    x = layer.sublayer[0](x, lambda y: layer.self_attn(y, y, y, tgt_mask))
    x = layer.sublayer[1](x, lambda y: layer.src_attn(y, memory, memory, src_mask))
    return layer.sublayer[2](x, layer.feed_forward)


def layer_calling_the_feed_forward(layer, x, memory, src_mask, tgt_mask):
    x = layer.sublayer[0](x, lambda y: layer.self_attn(y, y, y, tgt_mask))
    x = layer.sublayer[1](x, lambda y: layer.src_attn(y, memory, memory, src_mask))
    return layer.sublayer[2](x, layer.feed_forward(x))


def layer_with_a_wrong_attribute(layer, x, memory, src_mask, tgt_mask):
    x = layer.sublayer[0](x, lambda y: layer.self_attn(y, y, y, tgt_mask))
    x = layer.sublayer[1](x, lambda y: layer.cross_attn(y, memory, memory, src_mask))
    return layer.sublayer[2](x, layer.feed_forward)


def _sublayers(layer, memory, src_mask, tgt_mask):
    return [lambda y: layer.self_attn(y, y, y, tgt_mask),
            lambda y: layer.src_attn(y, memory, memory, src_mask), layer.feed_forward]


def layer_by_hand_without_dropout(layer, x, memory, src_mask, tgt_mask):
    # The residual and the norm in the layer's own order, but no dropout.
    for connection, fn in zip(layer.sublayer, _sublayers(layer, memory, src_mask, tgt_mask)):
        if connection.norm_first:
            x = x + fn(connection.norm(x))
        else:
            x = connection.norm(x + fn(x))
    return x


def layer_with_dropout_always_on(layer, x, memory, src_mask, tgt_mask):
    for connection, fn in zip(layer.sublayer, _sublayers(layer, memory, src_mask, tgt_mask)):
        drop = lambda t: F.dropout(t, connection.dropout.p)  # noqa: E731  (training=True by default)
        x = x + drop(fn(connection.norm(x))) if connection.norm_first else connection.norm(x + drop(fn(x)))
    return x


def layer_switching_to_eval(layer, x, memory, src_mask, tgt_mask):
    layer.eval()  # "to be deterministic"
    return DecoderLayer.forward(layer, x, memory, src_mask, tgt_mask)


def layer_in_eval_then_back(layer, x, memory, src_mask, tgt_mask):
    was = layer.training
    layer.eval()
    out = DecoderLayer.forward(layer, x, memory, src_mask, tgt_mask)
    layer.train(was)
    return out


@torch.no_grad()
def layer_without_gradients(layer, x, memory, src_mask, tgt_mask):
    return DecoderLayer.forward(layer, x, memory, src_mask, tgt_mask)


def layer_detaching_the_memory(layer, x, memory, src_mask, tgt_mask):
    return DecoderLayer.forward(layer, x, memory.detach(), src_mask, tgt_mask)


def layer_in_float32(layer, x, memory, src_mask, tgt_mask):
    return DecoderLayer.forward(layer, x, memory, src_mask, tgt_mask).float()


_OUTPUTS = {}


def layer_into_a_buffer(layer, x, memory, src_mask, tgt_mask):
    out = DecoderLayer.forward(layer, x, memory, src_mask, tgt_mask)
    buffer = _OUTPUTS.get((out.shape, out.dtype))
    if buffer is None:
        buffer = _OUTPUTS[(out.shape, out.dtype)] = torch.empty_like(out)
    buffer.copy_(out)
    return buffer


def layer_squeezing_its_output(layer, x, memory, src_mask, tgt_mask):
    return DecoderLayer.forward(layer, x, memory, src_mask, tgt_mask).squeeze()


def layer_by_hand_reading_dropout_p(layer, x, memory, src_mask, tgt_mask):
    """A right answer: the residual by hand in the layer's order, skipping a dropout of p = 0."""
    for connection, fn in zip(layer.sublayer, _sublayers(layer, memory, src_mask, tgt_mask)):
        drop = connection.dropout if connection.dropout.p > 0 else (lambda t: t)
        x = x + drop(fn(connection.norm(x))) if connection.norm_first else connection.norm(x + drop(fn(x)))
    return x


def layer_with_functional_dropout(layer, x, memory, src_mask, tgt_mask):
    """A right answer: F.dropout told the layer's mode."""
    for connection, fn in zip(layer.sublayer, _sublayers(layer, memory, src_mask, tgt_mask)):
        drop = lambda t: F.dropout(t, connection.dropout.p, training=layer.training)  # noqa: E731
        x = x + drop(fn(connection.norm(x))) if connection.norm_first else connection.norm(x + drop(fn(x)))
    return x


# ---------------------------------------------------------------- the tied embeddings


def _tied(tie="assign", share_rule="flag", embedding=Embeddings, generator="course",
          d_model=None):
    """A configurable tied_embeddings, for the usual wrong answers."""
    def tied_embeddings(src_vocab_size, tgt_vocab_size, d_model_given, share_embeddings):
        d = d_model or d_model_given
        tgt = embedding(tgt_vocab_size, d)
        src = embedding(src_vocab_size, d)
        if generator == "swapped":
            gen = Generator(tgt_vocab_size, d)
        elif generator == "no bias":
            gen = nn.Linear(d, tgt_vocab_size, bias=False)
        elif generator == "log_softmax":
            gen = LogSoftmaxGenerator(d, tgt_vocab_size)
        else:
            gen = Generator(d, tgt_vocab_size)
        linear = gen if isinstance(gen, nn.Linear) else gen.proj
        table = lambda e: e.lut.weight if isinstance(e, Embeddings) else e[0].lut.weight  # noqa: E731
        if embedding is nn.Embedding:
            table = lambda e: e.weight  # noqa: E731
        E = table(tgt)
        if tie == "assign":
            linear.weight = E
        elif tie == "source":
            linear.weight = table(src)
        elif tie == "copy":
            with torch.no_grad():
                linear.weight.copy_(E)
        elif tie == "new parameter":
            linear.weight = nn.Parameter(E.data)
        elif tie == "transposed":
            linear.weight = nn.Parameter(E.detach().T.clone())
        share = {"flag": share_embeddings, "never": False, "always": True}[share_rule]
        if share:
            src = tgt
        return src, tgt, gen
    return tied_embeddings


class LogSoftmaxGenerator(Generator):
    def forward(self, x):
        return self.proj(x).log_softmax(dim=-1)


def embedding_with_positions(vocab_size, d_model):
    return nn.Sequential(Embeddings(vocab_size, d_model), PositionalEncoding(d_model, 0.1))


def tied_returning_two(src_vocab_size, tgt_vocab_size, d_model, share_embeddings):
    src, tgt, gen = reference_tied(src_vocab_size, tgt_vocab_size, d_model, share_embeddings)
    return tgt, gen


def tied_with_swapped_table(src_vocab_size, tgt_vocab_size, d_model, share_embeddings):
    src, tgt, gen = reference_tied(src_vocab_size, tgt_vocab_size, d_model, share_embeddings)
    return Embeddings(d_model, src_vocab_size), tgt, gen


def tied_with_a_frozen_table(src_vocab_size, tgt_vocab_size, d_model, share_embeddings):
    src, tgt, gen = reference_tied(src_vocab_size, tgt_vocab_size, d_model, share_embeddings)
    tgt.lut.weight.requires_grad_(False)
    return src, tgt, gen


_CACHE = {}


def tied_from_a_cache(src_vocab_size, tgt_vocab_size, d_model, share_embeddings):
    key = (src_vocab_size, tgt_vocab_size, d_model, share_embeddings)
    if key not in _CACHE:  # "built once, reused"
        _CACHE[key] = reference_tied(*key)
    return _CACHE[key]


def tied_sharing_the_module(src_vocab_size, tgt_vocab_size, d_model, share_embeddings):
    """A right answer: with share_embeddings the source embedding is the target's module."""
    tgt, gen = Embeddings(tgt_vocab_size, d_model), Generator(d_model, tgt_vocab_size)
    gen.proj.weight = tgt.lut.weight
    return (tgt if share_embeddings else Embeddings(src_vocab_size, d_model)), tgt, gen


@torch.no_grad()
def tied_built_without_gradients(src_vocab_size, tgt_vocab_size, d_model, share_embeddings):
    """A right answer: modules built under no_grad keep parameters that require gradients."""
    return tied_sharing_the_module(src_vocab_size, tgt_vocab_size, d_model, share_embeddings)


def reference_tied(src_vocab_size, tgt_vocab_size, d_model, share_embeddings):
    """The course's own pieces: make_model's embeddings (without positions) and generator."""
    model = make_model(TransformerConfig(src_vocab_size, tgt_vocab_size, N=1, d_model=d_model,
                                         d_ff=2 * d_model, h=2, share_embeddings=share_embeddings))
    return model.src_embed[0], model.tgt_embed[0], model.generator


# ---------------------------------------------------------------- the parameter count


def reference_count(c: TransformerConfig) -> int:
    """Notebook 07's parameter_breakdown, summed."""
    attention = 4 * (c.d_model * c.d_model + c.d_model)
    ffn = 2 * c.d_model * c.d_ff + c.d_ff + c.d_model
    norm = 2 * c.d_model
    final_norm = norm if c.norm_first else 0
    tables = c.tgt_vocab_size if c.share_embeddings else c.src_vocab_size + c.tgt_vocab_size
    return (tables * c.d_model + c.N * (attention + ffn + 2 * norm) + final_norm
            + c.N * (2 * attention + ffn + 3 * norm) + final_norm + c.tgt_vocab_size)


def _counting(attention_bias=True, ff_bias=True, generator_bias=True, norms=True, final_norms=True,
              cross=True, tables="tied", positions=False, per_head=False, layers="N", d=None):
    """A configurable parameter_count, for the usual wrong answers."""
    def parameter_count(c):
        d_model = d or c.d_model
        attention = 4 * (d_model * d_model + (d_model if attention_bias else 0))
        if per_head:
            attention *= c.h
        ffn = 2 * d_model * c.d_ff + ((c.d_ff + d_model) if ff_bias else 0)
        norm = 2 * d_model if norms else 0
        final = 2 * norm if c.norm_first and final_norms else 0
        n = c.N if layers == "N" else 1
        encoder = n * (attention + ffn + 2 * norm)
        decoder = n * ((2 if cross else 1) * attention + ffn + 3 * norm)
        vocab = {
            "tied": c.tgt_vocab_size if c.share_embeddings else c.src_vocab_size + c.tgt_vocab_size,
            "generator counted": (c.tgt_vocab_size if c.share_embeddings
                                  else c.src_vocab_size + c.tgt_vocab_size) + c.tgt_vocab_size,
            "share ignored": c.src_vocab_size + c.tgt_vocab_size,
            "always shared": c.tgt_vocab_size,
        }[tables]
        extra = 2 * c.max_len * d_model if positions else 0
        return (vocab * d_model + encoder + decoder + final + extra
                + (c.tgt_vocab_size if generator_bias else 0))
    return parameter_count


def count_by_heads(c):
    """A right answer: the attention counted head by head, h blocks of d_k columns."""
    d, h = c.d_model, c.h
    d_k = d // h
    attention = 3 * h * (d * d_k + d_k) + (h * d_k * d + d)  # W_i^Q, W_i^K, W_i^V, then W^O
    ffn = 2 * d * c.d_ff + c.d_ff + d
    norm = 2 * d
    stacks = c.N * (attention + ffn + 2 * norm) + c.N * (2 * attention + ffn + 3 * norm)
    if c.norm_first:
        stacks += 2 * norm
    tables = c.tgt_vocab_size if c.share_embeddings else c.src_vocab_size + c.tgt_vocab_size
    return tables * d + stacks + c.tgt_vocab_size


def count_by_building(c):
    return count_parameters(make_model(c))


def count_as_float(c):
    return reference_count(c) / 1


WRONG_ANSWERS = [
    # The decoder layer.
    (check_decoder_layer_forward, not_done, r"raised NotImplementedError: the exercise is not done"),
    (check_decoder_layer_forward, _layer(cross_qkv="y y y"),
     r"encoder-decoder attention reads the decoder instead of the encoder"),
    (check_decoder_layer_forward, _layer(cross_qkv="y y y", cross_mask="tgt"),
     r"encoder-decoder attention reads the decoder instead of the encoder"),
    (check_decoder_layer_forward, _layer(cross_mask="tgt"),
     r"you gave the encoder-decoder attention the causal mask tgt_mask"),
    (check_decoder_layer_forward, _layer(cross_mask="none"),
     r"encoder-decoder attention has no mask: it attends to the padding of the source"),
    (check_decoder_layer_forward, _layer(self_mask="src", cross_mask="tgt"),
     r"self-attention got src_mask.*the two masks are swapped"),
    (check_decoder_layer_forward, _layer(self_mask="none"),
     r"self-attention has no mask: each target position then sees the later positions"),
    (check_decoder_layer_forward, _layer(self_qkv="y memory memory"),
     r"masked self-attention reads the memory"),
    (check_decoder_layer_forward, _layer(cross_qkv="memory y y"),
     r"takes its queries from the memory and its keys and values from the decoder"),
    (check_decoder_layer_forward, _layer(cross_qkv="memory memory memory"),
     r"takes its queries from the memory too"),
    (check_decoder_layer_forward, layer_with_self_attn_twice,
     r"you used layer\.self_attn for both attentions"),
    (check_decoder_layer_forward, layer_with_the_attentions_swapped,
     r"you swapped the two attention modules: layer\.self_attn is the masked self-attention"),
    (check_decoder_layer_forward, _layer(order=("self", "ff", "cross"), wrap=(0, 1, 2)),
     r"sublayers run in the order self_attn -> feed_forward -> src_attn"),
    (check_decoder_layer_forward, _layer(order=("cross", "self", "ff")),
     r"sublayers run in the order src_attn -> self_attn -> feed_forward"),
    (check_decoder_layer_forward, _layer(wrap=(0, 0, 0)),
     r"you wrapped self_attn in sublayer\[0\], src_attn in sublayer\[0\], feed_forward in "
     r"sublayer\[0\]: each sublayer has its own connection"),
    (check_decoder_layer_forward, layer_without_connections, r"no sublayer connection"),
    (check_decoder_layer_forward, layer_with_post_norm_by_hand,
     r"wrote the residual connection and layer norm yourself.*this layer is pre-norm"),
    (check_decoder_layer_forward, _layer(self_qkv="x x x"),
     r"the masked self-attention reads x, not the argument of its function: in pre-norm"),
    (check_decoder_layer_forward, _layer(cross_qkv="x memory memory"),
     r"the encoder-decoder attention reads x, not the argument of its function"),
    (check_decoder_layer_forward, layer_feeding_x_to_every_sublayer,
     r"layer\.sublayer\[1\] gets the layer's input x instead of the output of layer\.sublayer\[0\]"),
    (check_decoder_layer_forward, layer_adding_the_residual_twice,
     r"you added the residual yourself around layer\.sublayer\[0\]"),
    (check_decoder_layer_forward, layer_calling_itself, r"calls the layer itself"),
    (check_decoder_layer_forward, layer_with_its_own_causal_mask,
     r"self-attention's mask is not the tgt_mask you are given"),
    (check_decoder_layer_forward, layer_normalizing_the_memory,
     r"the keys of your encoder-decoder attention are not `memory` as you were given it"),
    (check_decoder_layer_forward, layer_with_a_hard_coded_shape,
     r"(?s)fixed shape \[3, 7, 12\].*size written into your code.*passed with \(batch=3, L_tgt=5, "
     r"L_src=7, d_model=12, h=2, d_ff=20\) but not with \(batch=2, L_tgt=6"),
    (check_decoder_layer_forward, layer_with_a_wrong_attribute,
     r"(?s)raised AttributeError: 'DecoderLayer' object has no attribute 'cross_attn'.*Hint: a "
     r"DecoderLayer holds layer\.self_attn, layer\.src_attn"),
    (check_decoder_layer_forward, layer_calling_the_feed_forward,
     r"(?s)raised TypeError: 'Tensor' object is not callable.*Hint: a sublayer connection takes a "
     r"function and calls it itself"),
    # ... its state and side effects, dtype and a batch of one sentence.
    (check_decoder_layer_forward, layer_by_hand_without_dropout,
     r"^in training mode \(layer\.train\(\)\), on a post-norm layer whose sublayer connections have "
     r"dropout p = 0\.5, your output is the output without dropout: your function ignores the "
     r"dropout"),
    (check_decoder_layer_forward, layer_in_eval_then_back,
     r"your output is the output without dropout.*do not switch the layer to evaluation mode"),
    (check_decoder_layer_forward, layer_switching_to_eval,
     r"layer_switching_to_eval switched layer from training mode to evaluation mode and left "
     r"it there"),
    (check_decoder_layer_forward, layer_with_dropout_always_on,
     r"^in evaluation mode \(layer\.eval\(\)\).*your function applies dropout in evaluation mode\. "
     r"F\.dropout\(t, p\) drops unless given training=False"),
    (check_decoder_layer_forward, layer_without_gradients,
     r"returned the layer's output without a gradient \(requires_grad is False\).*"
     r"remove @torch\.no_grad\(\)"),
    (check_decoder_layer_forward, layer_detaching_the_memory,
     r"no gradient reaches memory through the layer's output of layer_detaching_the_memory"),
    (check_decoder_layer_forward, layer_in_float32,
     r"returned the layer's output as torch\.float32 for torch\.float64 inputs.*\.float\(\)"),
    (check_decoder_layer_forward, layer_into_a_buffer,
     r"a second call of layer_into_a_buffer, on other inputs, changed the layer's output that the "
     r"first call had returned"),
    (check_decoder_layer_forward, layer_squeezing_its_output,
     r"(?s)expected \(1, 4, 14\), got \(4, 14\)\. Your result lost dimensions of size 1.*Hint: the "
     r"same function passed with batches of several sentences but not with a batch of one"),
    # The tied embeddings.
    (check_tied_embeddings, not_done, r"raised NotImplementedError: the exercise is not done"),
    (check_tied_embeddings, _tied(tie="none"), r"the generator's weight is not tied to the target "
     r"embedding: it is a matrix of its own"),
    (check_tied_embeddings, _tied(tie="copy"), r"holds a copy of the target embedding's values"),
    (check_tied_embeddings, _tied(tie="new parameter"),
     r"share their memory but are two Parameter objects"),
    (check_tied_embeddings, _tied(tie="transposed"),
     r"is the transpose of the target embedding\. No transpose is needed"),
    (check_tied_embeddings, _tied(tie="source"),
     r"your generator shares the source embedding's table"),
    (check_tied_embeddings, _tied(share_rule="always"),
     r"with share_embeddings=False the source embedding must keep a table of its own"),
    (check_tied_embeddings, _tied(share_rule="never"),
     r"with share_embeddings=True, the source embedding's table is not tied to the target "
     r"embedding.*src_embed\.lut\.weight = tgt_embed\.lut\.weight"),
    (check_tied_embeddings, _tied(embedding=nn.Embedding),
     r"returns the table's rows without the factor sqrt\(d_model\) = 2\.4495"),
    (check_tied_embeddings, _tied(embedding=embedding_with_positions),
     r"src_embed adds the positional encoding"),
    (check_tied_embeddings, _tied(generator="swapped"),
     r"bias has d_model = 6 entries, not tgt_vocab_size = 11.*swapped"),
    (check_tied_embeddings, _tied(generator="no bias"), r"your generator has no bias"),
    (check_tied_embeddings, _tied(generator="log_softmax"),
     r"your generator returns log-probabilities"),
    (check_tied_embeddings, tied_returning_two,
     r"should return three modules \(src_embed, tgt_embed, generator\), got a tuple of 2 items"),
    (check_tied_embeddings, tied_with_swapped_table,
     r"src_embed's table has shape \(6, 13\), \(d_model, vocab_size\): the arguments are swapped"),
    (check_tied_embeddings, tied_with_a_frozen_table,
     r"tgt_embed\.lut\.weight does not require a gradient \(requires_grad=False\): training would "
     r"never change it"),
    (check_tied_embeddings, tied_from_a_cache,
     r"two calls of tied_from_a_cache\(13, 11, 6, False\) returned modules that share 3 "
     r"Parameter\(s\): your function keeps modules or tables between calls"),
    (check_tied_embeddings, _tied(d_model=6),
     r"(?s)wrong shape for the table of tgt_embed .*: expected \(17, 10\), got \(17, 6\).*passed "
     r"with \(src_vocab=13, tgt_vocab=11, d_model=6\) but not with \(src_vocab=9, tgt_vocab=17, "
     r"d_model=10\): is a size written into your code"),
    # The parameter count.
    (check_parameter_count, not_done, r"raised NotImplementedError: the exercise is not done"),
    (check_parameter_count, _counting(attention_bias=False),
     r"biases of the attention projections are missing"),
    (check_parameter_count, _counting(ff_bias=False), r"the feed-forward network's biases are missing"),
    (check_parameter_count, _counting(generator_bias=False), r"the generator's bias is missing"),
    (check_parameter_count, _counting(attention_bias=False, ff_bias=False, generator_bias=False),
     r"every bias is missing"),
    (check_parameter_count, _counting(norms=False), r"the layer norms are missing"),
    (check_parameter_count, _counting(final_norms=False),
     r"the final layer norms of the pre-norm stacks are missing"),
    (check_parameter_count, _counting(cross=False),
     r"the decoder's encoder-decoder attention is missing"),
    (check_parameter_count, _counting(tables="generator counted"),
     r"a vocabulary table is counted once too often"),
    (check_parameter_count, _counting(tables="share ignored"), r"share_embeddings is ignored"),
    (check_parameter_count, _counting(tables="always shared"),
     r"one table for both languages whatever share_embeddings says"),
    (check_parameter_count, _counting(positions=True), r"counted the positional encoding's tables"),
    (check_parameter_count, _counting(per_head=True), r"gave each head its own d_model x d_model"),
    (check_parameter_count, _counting(layers="one"), r"you counted one layer per stack"),
    (check_parameter_count, _counting(attention_bias=False, ff_bias=False, generator_bias=False,
                                      norms=False),
     r"two things: every bias is missing.*; and the layer norms are missing"),
    (check_parameter_count, _counting(cross=False, tables="generator counted"),
     r"two things: the decoder's encoder-decoder attention is missing.*; and a vocabulary table "
     r"is counted once too often"),
    (check_parameter_count, count_by_building,
     r"builds modules to count their parameters \(it calls make_model\(\.\.\.\): count by hand"),
    (check_parameter_count, count_as_float,
     r"should return the count as an int \(a whole number\), got a float, \d+\.0"),
    (check_parameter_count, lambda c: 63_119_496,
     r"gives 63,119,496 for \(N=3, .*the count of another configuration.*written into your code"),
    (check_parameter_count, _counting(d=12),
     r"(?s)counts [\d,]+ parameters for \(N=2, d_model=24.*passed with \(src_vocab=13, "
     r"tgt_vocab=11, d_model=12, d_ff=20, h=2, N=3\) but not with \(src_vocab=37.*size written "
     r"into your code"),
]


@pytest.mark.parametrize("check, wrong, message", WRONG_ANSWERS,
                         ids=[f"{c.__name__}-{m[:40]}" for c, _, m in WRONG_ANSWERS])
def test_check_names_the_mistake_of_a_typical_wrong_answer(check, wrong, message):
    with pytest.raises(ExerciseFailed, match=message):
        check(wrong)


RIGHT_ANSWERS = [
    (check_decoder_layer_forward, layer_by_hand_reading_dropout_p),
    (check_decoder_layer_forward, layer_with_functional_dropout),
    (check_tied_embeddings, tied_sharing_the_module),
    (check_tied_embeddings, tied_built_without_gradients),
    (check_parameter_count, count_by_heads),
]


@pytest.mark.parametrize("check, fn", RIGHT_ANSWERS, ids=[fn.__name__ for _, fn in RIGHT_ANSWERS])
def test_check_passes_on_a_right_answer_written_another_way(check, fn, capsys):
    check(fn)
    assert capsys.readouterr().out.startswith(f"{check.__name__} passed: ")


def test_the_layer_check_tries_a_batch_of_one_float64_both_modes_and_leaves_no_mode_changed():
    seen = []

    def spy(layer, x, memory, src_mask, tgt_mask):
        seen.append((x.size(0), x.dtype, layer.training, layer.sublayer[0].dropout.p,
                     x.requires_grad))
        return DecoderLayer.forward(layer, x, memory, src_mask, tgt_mask)

    check_decoder_layer_forward(spy)
    assert (1, torch.float32, True, 0.0, False) in seen  # a batch of one sentence
    assert any(dtype == torch.float64 for _, dtype, *_ in seen)
    assert any(training and p > 0 for _, _, training, p, _ in seen)
    assert any(not training and p > 0 and grad for _, _, training, p, grad in seen)


@pytest.mark.parametrize("check, fn", [
    (check_decoder_layer_forward, DecoderLayer.forward),
    (check_tied_embeddings, reference_tied),
    (check_parameter_count, reference_count),
], ids=["decoder_layer_forward", "tied_embeddings", "parameter_count"])
def test_check_passes_on_the_course_code_and_leaves_the_global_random_state_alone(check, fn, capsys):
    state = torch.random.get_rng_state()
    check(fn)
    printed = capsys.readouterr().out
    assert " passed: " in printed
    assert torch.equal(state, torch.random.get_rng_state())
    if check is check_parameter_count:  # and it reports Table 3's two models
        assert "base 63,119,496 (-2.9% from Table 3's 65M)" in printed
        assert "big 214,282,376 (+0.6% from Table 3's 213M)" in printed


def tied_the_other_way(src_vocab_size, tgt_vocab_size, d_model, share_embeddings):
    """A right answer: the embeddings given the generator's matrix, one Parameter as well."""
    src, tgt, gen = Embeddings(src_vocab_size, d_model), Embeddings(tgt_vocab_size, d_model), \
        Generator(d_model, tgt_vocab_size)
    tgt.lut.weight = gen.proj.weight
    if share_embeddings:
        src.lut.weight = gen.proj.weight
    return src, tgt, gen


def test_tying_in_the_other_direction_also_passes(capsys):
    """The embedding given the generator's matrix is one Parameter as well."""
    check_tied_embeddings(tied_the_other_way)
    assert " passed: " in capsys.readouterr().out

