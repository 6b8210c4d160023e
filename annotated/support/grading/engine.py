"""One engine for every declared check: a check is data, the engine runs it.

A :class:`Declaration` names the function and its arguments' roles, the probes it is called on, the
course's reference, the output contract (:class:`Tensor`, :class:`Value`, :class:`Module`, or :class:`Items`
of them) and the known mistakes (:class:`Mistake`). Every message the checks share is written once here.

``annotated.support.record`` calls the learner's function and describes what it did as data; the engine
judges the description: in a notebook both run in the kernel (:func:`run`); the grader records the calls in
the submission's kernel and judges the records in its own process (:func:`plan`, :func:`judge_record`), so
nothing a notebook redefines changes the verdict.
"""

import copy
import io
import math
import re
import textwrap
import tokenize
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from annotated.support import record as recorder
from annotated.support.grading.core import (
    _DTYPE_HINTS, _IN_PLACE, _TO_FLOAT32, ATOL, ATOL64, RTOL, RTOL64, ExerciseFailed, _a, _describe, _function,
    _hard_coded_hint, _named_argument, _squeezed,
)

# ---------------------------------------------------------------- what a declaration is made of


@dataclass
class Probe:
    """One call of the learner's function. ``label`` names its result in a message, with ``{name}`` (the
    learner's function) and ``{what}`` (the output's): "{what} of {name}(tokens of shape (3, 6), pad_idx=0)"."""

    args: tuple
    label: str
    sizes: dict | None = None  # its set: a failure after whole sets passed blames a size written into the code
    grad: tuple = ()  # the arguments that require grad, through which gradients must flow
    again: tuple | None = None  # the arguments of a second call, after which the first result must be unchanged
    again_what: str | None = None  # how a message names that first result
    hints: tuple = ()  # (pattern, text): the text is added to an exception whose message matches
    tags: dict = field(default_factory=dict)  # what mistakes select on
    compare: bool = True  # whether numbers are compared (not on 'meta')
    mistakes: bool = True  # whether known mistakes are tried
    on_error: Callable | None = None  # (exception as data, name) -> the message, instead of the usual one
    # The type's name of the exception the call must raise ("ValueError"): the call ``again`` when there is
    # one (the grader's recorder stops at a first call that raises).
    error: str | None = None
    no_error: Callable | None = None  # name -> the message when it returns instead
    accept: Callable | None = None  # (the items' numbers) -> whether they pass (a tie: more than one is right)
    precision: str | float | None = None  # overrides the contract's
    seed: int | None = None  # the global generator's seed before the call (what F.dropout draws, ``accept`` can)
    on: tuple | None = None  # the arguments a :class:`Module` result is called on
    each: bool = False  # ``args`` holds the arguments of several calls, judged together as the list of results
    chain: int | None = None  # (each) the calls share the first's argument ``chain`` (a cache); the last is judged
    fills: tuple | None = None  # (argument, keys): what the call left in that dict joins its result

    def text(self, name: str, what: str = "the result") -> str:
        return self.label.replace("{name}", name).replace("{what}", what)


@dataclass
class Tensor:
    """A result that is one tensor. ``dtype``: "floating" (argument ``like``'s, real), "bool" (a mask), "ids"
    (argument ``like``'s integer dtype; with ``like`` None, one of ``dtypes``, "integer" for any). ``like``:
    the argument whose dtype and device it takes (None: the cpu, a floating dtype of ``dtypes``)."""

    what: str
    dtype: str = "floating"
    like: int | None = 0
    label: str | None = None  # how a probe's label names it, when not by ``what``
    device_from: int | None = None  # the argument that names the device instead (None in it: the cpu)
    kind: str = ""  # "a bool", "a token": how "should return {what} as {kind} tensor" reads
    device_text: dict = field(default_factory=dict)  # by case ("asked", "cpu", "elsewhere"): what to do
    dtype_message: Callable | None = None  # (tensor data, name, what, args) -> the message for another dtype
    mismatch: Callable | None = None  # (got, expected, label) -> the message for numbers no mistake explains
    # "float32": a float64 result may have float32's rounding; a number: the absolute tolerance of every
    # comparison, the known mistakes' too.
    precision: str | float | None = None
    dtypes: tuple = ("float32",)
    other: Callable | None = None  # (result as data, name, what) -> the message for what is no tensor, or None


@dataclass
class Value:
    """A plain result: a number, bool, string, None, or a list, tuple, dict or set of them, equal to the
    reference's item by item (NaN equals NaN; an int passes where a float is). ``kind``: its built-in type
    ("float", "int", "bool", "str", "list", "tuple", "dict", "set"); a tensor or NumPy number is the wrong type
    (``.item()`` makes a Python number) unless ``numbers`` (or ``numpy``) allows it."""

    what: str
    kind: str = "float"
    precision: float | None = None  # absolute for floats, or (absolute, relative): within either
    numbers: bool = False  # whatever float(), int() or bool() reads as one number of the kind passes (0-d tensor)
    label: str | None = None
    numpy: bool = False  # a NumPy number of the kind passes (np.floating for a float), a tensor does not
    sequence: bool = False  # a tuple passes where a list is asked, a list where a tuple is
    other: Callable | None = None  # (result as data, name, what) -> the message for another type, or None
    # (result as described) -> the plain value compared, or None where there is none; a reference that is not
    # plain data (modules) is described as the learner's is, with the probe's ``on``, and read too.
    read: Callable | None = None


@dataclass
class Module:
    """A module result: its parameters' names and shapes, its mode and, with ``Probe.on``, its output there."""

    what: str
    label: str | None = None
    precision: None = None  # compared at float32's


@dataclass
class Items:
    """A tuple of tensors (or :class:`Value` items); ``what`` names the tuple."""

    items: tuple
    what: str
    again_what: str = "the result"


@dataclass
class Mistake:
    """A known wrong answer and its message. Found by ``like`` (a wrong function with the learner's signature
    whose result, on ``items`` of a tuple, equals the learner's), by ``shape`` (probe -> the shape of the
    learner's item ``item``), by ``find`` (the item as data, with ``calls`` and ``again``, and the probe ->
    a message or None) or by ``source`` (a pattern of the learner's code, ``_code``). ``stage``: "value"
    (numbers differ), "shape" (added to a wrong shape's report), "source" (before any call; ``{found}`` is the
    code), "error" (an exception matching ``error`` or ``like``'s own), "always" (every result that passed the
    contract, right or wrong). ``name``: the mistake in a few words; ``example``: a wrong answer making it."""

    message: str | Callable
    name: str
    like: Callable | None = None
    items: tuple | None = None
    shape: Callable | None = None
    find: Callable | None = None
    item: int = 0
    stage: str = "value"
    when: Callable = lambda probe: True
    example: Callable | None = None
    prefix: str = ""
    source: str | None = None
    error: str | None = None
    generic: bool = False  # a size written into the code may explain it too

    def text(self, probe: Probe) -> str:
        return self.message(probe) if callable(self.message) else self.message


@dataclass
class Declaration:
    """An exercise, as data: see the module's docstring."""

    check: str                      # check_padding_mask
    function: str                   # padding_mask
    roles: tuple                    # the arguments, in order: ("tokens", "pad_idx")
    reference: Callable             # the course's function, called as the learner's is
    probes: Callable                # (other device or None) -> [Probe, ...]
    returns: Tensor | Value | Module | Items
    mistakes: tuple = ()
    passed: str | Callable = ""     # the line printed when it passes ({name}: the learner's function)
    sizes_fix: str | Callable = ""  # how to read a size rather than write it, for the hint (or the hint itself)
    in_place: str = ""              # what to do instead of changing an argument in place, when not the engine's
    consistent: bool = False        # a mistake by like is named only where it explains the learner's whole set
    errors_first: bool = False      # (consistent) an exception in a set is named before its wrong numbers


class Failure(ExerciseFailed):
    """A failed check, with the mistake's short name and whether a size written into the code may explain it."""

    def __init__(self, message: str, name: str, generic: bool = False, mistake: Mistake | None = None):
        super().__init__(message)
        self.name, self.generic, self.mistake = name, generic, mistake


# ---------------------------------------------------------------- tensors as the records hold them


def _map(value, leaf: Callable):
    """``leaf`` of each item of lists, tuples and dicts, nested."""
    if isinstance(value, (list, tuple)):
        return (list if isinstance(value, list) else tuple)(_map(v, leaf) for v in value)
    if isinstance(value, dict):
        return {k: _map(v, leaf) for k, v in value.items()}
    return leaf(value)


def _clone(value):
    def leaf(v):
        if hasattr(v, "_recipe"):  # built again from its recipe, as the kernel does
            return recorder.decode(recorder.encode(v))
        if isinstance(v, torch.nn.Module):
            return copy.deepcopy(v)
        return v.detach().clone() if torch.is_tensor(v) else v
    return _map(value, leaf)


def _plain(value):
    """The reference's or a mistake's result as tensors on the cpu (a 'meta' tensor stays)."""
    return _map(value, lambda v: (v.detach() if v.device.type in ("cpu", "meta") else v.detach().cpu())
                if torch.is_tensor(v) else v)


def _run_on(fn, probe: "Probe"):
    """``fn`` on the probe's arguments (copies), or on each call's of an ``each`` probe (a list)."""
    fn = recorder._filling(fn, probe.fills) if probe.fills is not None else fn
    return recorder._each(fn, probe.chain)(*_clone(probe.args)) if probe.each else fn(*_clone(probe.args))


def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def _integer(dtype: torch.dtype) -> bool:
    return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool


def _equal(got: torch.Tensor, expected: torch.Tensor, precision: str | float = "float32") -> bool:
    """``got`` equals ``expected``: exactly for bool and integers, else to float32's (or float64's) rounding,
    or within an absolute ``precision``; NaN never equals."""
    if got is None or expected is None or tuple(got.shape) != tuple(expected.shape):
        return False
    if expected.device.type == "meta":
        return True
    if not expected.is_floating_point() and not got.is_floating_point():
        return bool(torch.equal(got, expected.to(got.dtype)))
    atol, rtol = (ATOL64, RTOL64) if precision == "float64" else (ATOL, RTOL)
    if not isinstance(precision, str):
        atol, rtol = precision, 0.0
    return bool(torch.allclose(got.double(), expected.double(), atol=atol, rtol=rtol))


def _unequal(now: torch.Tensor, was: torch.Tensor) -> torch.Tensor:
    """Where ``now`` differs from ``was`` (NaN equals NaN)."""
    same = now == was
    return ~(same | now.isnan() & was.isnan()) if now.is_floating_point() else ~same


def _short(value, width: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= width else f"{text[:width - 20]} ... {text[-12:]} ({len(text)} characters)"


def _difference(got, expected, precision: float | None = None, where: str = "") -> str | None:
    """Where the plain value ``got`` first differs from ``expected``, in words; None where they are equal."""
    at = f" at {where}" if where else ""
    if isinstance(expected, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        relative = isinstance(precision, tuple)  # (absolute, relative)
        if got == expected or math.isnan(got) and math.isnan(expected) or (
                math.isclose(got, expected, abs_tol=precision[0], rel_tol=precision[1]) if relative
                else precision is not None and abs(got - expected) <= precision):
            return None
        within = (f" (more than {precision[1]:g} of it apart)" if relative else
                  f" (more than {precision:g} apart)" if precision is not None else "")
        return f"{_short(got)} instead of {_short(expected)}{at}{within}"
    if type(got) is not type(expected):
        return f"{_a(type(got).__name__)} ({_short(got, 60)}) instead of {_a(type(expected).__name__)} " \
               f"({_short(expected, 60)}){at}"
    if isinstance(expected, dict):
        missing, extra = [k for k in expected if k not in got], [k for k in got if k not in expected]
        if missing or extra:
            return (f"{len(missing)} key(s) missing{at} ({_short(missing[:5], 60)}) and {len(extra)} key(s) "
                    f"not in the expected dict ({_short(extra[:5], 60)})")
        pairs = [(f"{where}[{k!r}]", got[k], expected[k]) for k in expected]
    elif isinstance(expected, (list, tuple)):
        if len(got) != len(expected):
            return f"{len(got)} items instead of {len(expected)}{at}"
        pairs = [(f"{where}[{i}]", a, b) for i, (a, b) in enumerate(zip(got, expected))]
    else:
        return None if got == expected else f"{_short(got)} instead of {_short(expected)}{at}"
    return next((d for w, a, b in pairs if (d := _difference(a, b, precision, w))), None)


def _as_kind(contract: Value, found: dict, same_type: bool = True):
    """A described result as the plain value of the contract's kind, where the exercise allows it; else None.
    ``same_type`` False: only what stands in for that kind (another sequence, a number read from a tensor)."""
    kind, value = contract.kind, found.get("value")
    if same_type and found["kind"] == "value" and found["type"] == kind:
        return set(value) if kind == "set" else value
    if contract.sequence and found["kind"] == "value" and {found["type"], kind} == {"tuple", "list"}:
        return (list if kind == "list" else tuple)(value)
    whole = isinstance(value, int) and not isinstance(value, bool)
    if contract.numpy and found.get("module") == "numpy" and found["kind"] == "object" and (
            kind == "int" and whole or kind == "float" and isinstance(value, float)):
        return value  # np.integer, np.floating
    if not contract.numbers or kind not in ("float", "int", "bool"):
        return None
    if found["kind"] != "tensor":  # an int where a float is asked is that number
        return value if {"float": whole or isinstance(value, float), "int": whole,
                         "bool": isinstance(value, bool)}[kind] else None
    values = found["values"]  # a tensor of one number (None on 'meta')
    if values is None or math.prod(found["shape"]) != 1 or not {
            "float": not values.is_complex(), "int": _integer(values.dtype), "bool": values.dtype == torch.bool}[kind]:
        return None
    return {"float": float, "int": int, "bool": bool}[kind](values.reshape(()).item())


def _read(contract, found: dict):
    """What the comparison reads of one described item: a tensor's numbers, a plain value, a module's description."""
    if isinstance(contract, Module):
        return found
    if not isinstance(contract, Value):
        return found["values"]
    return contract.read(found) if contract.read is not None else _as_kind(contract, found)


def _agrees(contract, found: dict, expected, precision) -> bool:
    """The learner's item (as described) equals ``expected``, at the contract's precision."""
    if isinstance(contract, Value):
        return _difference(_read(contract, found), expected, precision) is None
    if isinstance(contract, Module):
        return _module_difference(found, expected) is None
    values = found["values"]
    if precision == "float64" and values is not None and (values.dtype, expected.dtype) == (torch.float32,
                                                                                           torch.float64):
        return False  # float32's rounding, however close it happens to land (it can, on one code path)
    return _equal(values, expected, precision)


def _module_difference(found: dict, expected: dict) -> str | None:
    """How a described module differs from the reference's (described the same way), or None."""
    if found["parameters"] != expected["parameters"]:
        return f"its parameters (name: shape) are {found['parameters']}, expected {expected['parameters']}"
    if found["training"] != expected["training"]:
        return f"it is in {'training' if found['training'] else 'evaluation'} mode, expected the other"
    if "outputs_raised" in found:
        err = found["outputs_raised"]
        return f"calling it on the probe's input raised {err['type']}: {err['message']}"
    mine, theirs = found.get("outputs"), expected.get("outputs")
    if theirs is not None and not (mine is not None and mine["kind"] == "tensor"
                                   and _equal(mine["values"], theirs["values"])):
        return "its output on the probe's input differs from the reference module's"
    return None


def _as_data(contracts: tuple, values: tuple, probe: Probe) -> tuple:
    """The reference's (or a wrong answer's) items, a module described as the kernel describes one; for a
    :class:`Value` with ``read``, a result that is not plain data (modules) described so, then read."""
    return tuple(recorder.describe(v, on=_clone(probe.on)) if isinstance(c, Module) and v is not None else
                 c.read(recorder.describe(v, on=_clone(probe.on))) if isinstance(c, Value) and c.read and
                 recorder._plain(v, [math.inf, math.inf]) is recorder._NOT_PLAIN else v
                 for c, v in zip(contracts, values))


# ---------------------------------------------------------------- messages written once


_PLAIN_IN_PLACE = ("A function must not change its inputs: whoever called it uses them again (and this check "
                   "compares your result with results computed from them). Work on a copy: list(x), dict(x), "
                   "sorted(x) rather than x.sort(), x.pop(...), del x[...], x[...] = ...")


def _changed(args: tuple, done: dict, signature, roles, each: bool = False) -> tuple[str, str] | None:
    """(which argument the call changed in place and how, what to do instead), or None when none changed.
    ``each``: every argument is the arguments of one call."""
    for i, (arg, after) in enumerate(zip(args, done.get("inputs_after", []))):
        where, how = _named_argument(i, signature or [], roles), None
        if after is None:
            continue
        if each and "items" in after:  # one call of an ``each`` probe: its own arguments
            changed = _changed(arg, {"inputs_after": after["items"], "layout_before": done["layout_before"][i]},
                               signature, roles)
            if changed:
                return changed
        elif isinstance(arg, (list, dict)) and "value" in after:
            if (_difference(after["value"], recorder._plain(arg, [math.inf, math.inf])) is not None
                    or after["class"] != type(arg).__name__):
                return f"{where} in place (now {_short(after['value'], 100)})", _PLAIN_IN_PLACE
        elif torch.is_tensor(arg):
            if tuple(after["shape"]) != tuple(arg.shape):
                how = f"its shape went from {tuple(arg.shape)} to {tuple(after['shape'])}"
            elif _dtype(after["dtype"]) != arg.dtype:
                how = f"its dtype went from {arg.dtype} to torch.{after['dtype']}"
            elif after["layout"] != done["layout_before"][i]:
                how = "its layout in memory changed (a transpose_ of two dimensions of the same size?)"
            elif after["values"] is not None and arg.device.type != "meta":
                wrong = _unequal(after["values"], arg.detach().cpu())
                how = f"{int(wrong.sum())} of its {wrong.numel()} numbers changed" if wrong.any() else None
            if how:
                return f"{where} in place: {how}", _IN_PLACE
    return None


def _exception(err: dict, name: str, args: tuple, probe: Probe, done: dict, signature, roles) -> Failure:
    """The message of an exception of the learner's function, from its description."""
    if probe.each and err.get("call") is not None:  # the call of the probe's that raised it
        args = args[err["call"]]
    if err["type"] == "NotImplementedError":
        inner = err["inner"] or name
        if inner not in (name, "<module>"):  # an earlier exercise that this one calls
            return Failure(
                f"{name} calls {inner}, which raised NotImplementedError: that earlier exercise is "
                f"not done yet. Write {inner} first (its cell says `# YOUR CODE HERE`), run its "
                "cell, then run this cell and this check again.", "an earlier exercise not done")
        return Failure(
            f"{name} raised NotImplementedError: the exercise is not done yet. Replace `# YOUR CODE HERE` and `raise "
            "NotImplementedError()` in its cell with your code, run that cell, then run this check again.", "not done")
    if probe.on_error is not None:
        return Failure(probe.on_error(err, name), f"an exception ({err['type']})", generic=True)
    text, hint = err["message"], ""
    if "view size is not compatible" in text:
        hint = ("\nHint: after transpose(1, 2) the tensor is no longer contiguous in memory, so "
                ".view cannot merge its dimensions; use .reshape(...) (or .contiguous().view(...)).")
    fixed = re.search(r"shape '(\[[-\d, ]*\])' is invalid for input of size (\d+)", text)
    if fixed:
        hint = (f"\nHint: your function reshapes to the fixed shape {fixed.group(1)}, which does not fit the "
                f"{fixed.group(2)} numbers of this input: is a size written into your code? Read every size from the "
                "input's shape (batch, L, d_model = x.shape); the check calls your function with several sizes.")
    if err["system_exit"]:
        hint = "\nHint: exit() and sys.exit() stop the program; return the result instead."
    if err["type_error"] and err["frames"] == 1:  # the call itself failed: its parameters
        passed = ", ".join(roles[: len(args)]) or f"{len(args)} arguments"
        hint = (f"\nHint: the check calls {name}({passed}) here: give your function the "
                "parameters of the exercise's `def` line.")
    hint += "".join(extra for pattern, extra in probe.hints if re.search(pattern, text))
    where = ""
    if err["where"]:
        function, line, source = err["where"]
        where = f"\n  in {function}, line {line}" + (f": {source}" if source else "")
    message = f"{name}({_describe(args)}) raised {err['type']}: {text}{where}{hint}"
    changed = _changed(args, done, signature, roles)
    if changed:
        message += (f"\nBefore that, {name} changed {changed[0]}; a function must not change its inputs: " +
                    ("use operations that return a new tensor." if changed[1] is _IN_PLACE else
                     "work on a copy (list(x), dict(x), sorted(x))."))
    return Failure(message, f"an exception ({err['type']})", generic=True)


def _none(found: dict, name: str, what: str) -> Failure | None:
    if found["kind"] == "none":
        return Failure(f"{name} returned None: did you forget the `return` of {what}?", "no result returned")
    return None


_WORDS = {"str": "string", "int": "int (a whole number)", "float": "float"}


def _not_plain(contract: Value, found: dict, name: str, what: str) -> Failure | None:
    """A result that is not of the plain type the contract names."""
    read = contract.read(found) if contract.read is not None else _as_kind(contract, found)
    if read is not None or _as_kind(contract, found, same_type=False) is not None or (
            contract.numbers and found["kind"] == "tensor" and found["values"] is None):  # on 'meta': value unknown
        return None
    if found["kind"] == "none":
        return _none(found, name, what)
    message = contract.other(found, name, what) if contract.other else None
    if message:
        return Failure(message, f"not {_a(contract.kind)}")
    hint = ""
    if found["kind"] == "tensor":
        got = f"a tensor of shape {tuple(found['shape'])}"
        if math.prod(found["shape"]) == 1 and contract.kind in ("float", "int", "bool"):
            dtype = _dtype(found["dtype"])
            fits = {"float": not dtype.is_complex and dtype != torch.bool, "bool": dtype == torch.bool,
                    "int": _integer(dtype)}
            item = "the tensor's .item()" if fits[contract.kind] else f"{contract.kind}(t.item()) of the tensor t"
            hint = f": return a Python {contract.kind}, {item}"
    elif found["kind"] == "value":
        got = f"{_a(_WORDS.get(found['type'], found['type']))}, {_short(found['value'], 60)}"
        if contract.kind in ("float", "int") and found["type"] in ("float", "int"):
            hint = f": convert it, {contract.kind}(...)" if contract.kind == "float" else (
                ": an int is asked (int(...), or // for a whole division)")
    else:
        got = _a(found["type"]) + (f" of length {found['length']}" if "length" in found else "")
        if found.get("module") == "numpy":
            hint = f": return a Python {contract.kind}, {contract.kind}(...) of it"
        elif found["kind"] == "sequence":
            hint = ": a plain value holds no tensors (.item() or .tolist() of each)"
    return Failure(f"{name} should return {what} as {_a(_WORDS.get(contract.kind, contract.kind))}, got {got}{hint}",
                   f"not {_a(contract.kind)}")


def _not_a_tensor(found: dict, name: str, what: str, kind: str) -> Failure | None:
    if found["kind"] == "tensor":
        return None
    if found["kind"] == "none":
        return _none(found, name, what)
    start = f"{name} should return {what} as {kind or 'a'} tensor, got"
    if found["kind"] == "value" and found["type"] in ("list", "tuple") and all(
            isinstance(v, (int, float)) for v in found["value"]):
        return Failure(f"{start} a {found['type']} of {found['length']} numbers: return them as one tensor, "
                       "torch.stack([...]) of the tensors (keep them tensors, without .item())", "not a tensor")
    hint = ""
    if found["kind"] == "sequence" or found["type"] in ("list", "tuple"):
        hint = f" of length {found['length']}: return the tensor itself, not a {found['type']}"
    elif found.get("module") == "numpy" or found["type"] in ("int", "float", "bool"):
        hint = ": keep to torch operations, which return tensors (no .numpy(), .tolist() or .item())"
    return Failure(f"{start} {found['type']}{hint}", "not a tensor")


_DEVICE_TEXT = {
    "asked": "the check asked for device={device!r}: create every tensor there, device=device.",
    "elsewhere": ("the inputs are on {device}: build every tensor where the inputs are, with no "
                  ".cuda() or .to(...), and device=x.device (an input's) for a tensor you create."),
    "cpu": "the check expects it on the cpu, where its inputs are: leave out .cuda(), .to(...) and device=...",
}


def _contract(contract: Tensor | Value, found: dict, args: tuple, name: str, what: str) -> Failure | None:
    """Type, device, layout and dtype of one item of the result (the type of a plain value), before any
    comparison."""
    if isinstance(contract, Value):
        return _not_plain(contract, found, name, what)
    if isinstance(contract, Module):
        return _none(found, name, what) or (None if found["kind"] == "module" else Failure(
            f"{name} should return {what} as a module (an nn.Module), got {_a(found.get('type', found['kind']))}",
            "not a module"))
    failure = _not_a_tensor(found, name, what, contract.kind)
    if failure:
        message = contract.other(found, name, what) if contract.other else None
        return Failure(message, failure.name) if message else failure
    # The device: one the arguments name ("asked"), the inputs' ("elsewhere" when not the cpu), or the cpu.
    device, case = "cpu", "cpu"
    if contract.device_from is not None:
        given = args[contract.device_from] if contract.device_from < len(args) else None
        if given is not None:
            device, case = str(torch.device(given)), "asked"
    elif contract.like is not None and torch.is_tensor(args[contract.like]):
        device = str(args[contract.like].device)
        case = "cpu" if device == "cpu" else "elsewhere"
    have, want = torch.device(found["device"]), torch.device(device)
    if have.type != want.type or (want.index is not None and have.index != want.index):
        where = contract.device_text.get(case, _DEVICE_TEXT[case]).format(device=device)
        return Failure(f"{name} returned {what} on the device {found['device']}, but {where}", "the wrong device")
    if found["layout"] != "strided":
        ordinary = "ordinary (dense) bool tensor" if contract.dtype == "bool" else "ordinary (dense) tensor"
        return Failure(f"{name} returned {what} as a torch.{found['layout']} tensor; return an {ordinary}, "
                       "without .to_sparse().", "a sparse tensor")
    dtype = _dtype(found["dtype"])
    like = args[contract.like] if contract.like is not None else None

    def wrong(message: str, failure: str = "the wrong dtype") -> Failure:
        return Failure(contract.dtype_message(found, name, what, args) if contract.dtype_message else message,
                       failure)

    if contract.dtype == "bool":
        return None if dtype == torch.bool else wrong(
            f"{name} returned {what} as a {dtype} tensor; expected a bool tensor.", "not a bool mask")
    if contract.dtype == "ids" and like is None:  # integers made from numbers: the dtypes allowed
        allowed = contract.dtypes
        if not (_integer(dtype) and "integer" in allowed) and found["dtype"] not in allowed:
            wanted = "an integer tensor" if "integer" in allowed else f"torch.{allowed[0]}"
            return wrong(f"{name} returned {what} as {dtype}; expected {wanted}.")
        return None
    if contract.dtype == "ids":
        return None if dtype == like.dtype else wrong(
            f"{name} returned {what} as {dtype}; it keeps the dtype of its input, {like.dtype}.")
    allowed = [like.dtype] if like is not None else [_dtype(d) for d in contract.dtypes]
    expected = allowed[0]
    if not dtype.is_floating_point:
        kind = "complex" if dtype.is_complex else "bool" if dtype == torch.bool else "integer"
        same = ", the dtype of the inputs" if like is not None else ""
        return Failure(f"{name} returned {what} as a {dtype} tensor, {_a(kind)} one; expected a real "
                       f"floating tensor, {expected}{same}. {_DTYPE_HINTS[kind]}", f"{_a(kind)} tensor")
    if dtype not in allowed:
        fix = _TO_FLOAT32 if dtype == torch.float32 else (
            "Remove the conversion (.double(), .half(), .to(...)) or the dtype=... of a tensor you create.")
        return wrong(f"{name} returned {what} as {dtype} for {expected} inputs; it must keep the "
                     f"dtype of its inputs, {expected} (in a model, another dtype changes the precision, "
                     f"or the dtype, of every later step). {fix}")
    return None


def _default_mismatch(got: torch.Tensor, expected: torch.Tensor, label: str) -> str:
    """Numbers that differ and no known mistake explains: NaN named, else where they differ."""
    if not expected.is_floating_point():
        wrong = got != expected.to(got.dtype)
        first = tuple(wrong.nonzero()[0].tolist())
        return (f"mismatch in {label}: {int(wrong.sum())} of its {wrong.numel()} entries differ from the "
                f"course's, the first at index {first}: yours {got[first].item()}, expected {expected[first].item()}.")
    bad = ~got.isfinite() & expected.isfinite()
    if bad.any():
        first = tuple(bad.nonzero()[0].tolist())
        return (f"{label} contains NaN or inf in {int(bad.sum())} of its {bad.numel()} numbers, where the reference "
                f"has finite numbers (the first at index {first}: {got[first].item()} instead of "
                f"{expected[first].item():.4g}). Look for a division by zero, a log or sqrt of a number <= 0, or a "
                "tensor left uninitialized (torch.empty).")
    try:
        torch.testing.assert_close(got.double(), expected.double(), atol=ATOL, rtol=RTOL)
    except AssertionError as err:
        return f"mismatch in {label}, compared with the reference:\n{err}"
    return f"mismatch in {label}, compared with the reference"


def _float32_precision(got: torch.Tensor, expected: torch.Tensor, label: str) -> str:
    worst = float((got.double() - expected.double()).abs().max())
    return (f"for float64 inputs, the float64 reference and {label} differ by up to {worst:.1e}, about float32's "
            "precision (float64 results agree to about 1e-15): a step computes in float32 and converts back. Look "
            "for a .float() or a tensor created without dtype= (torch.zeros, torch.ones, torch.tensor of Python "
            "floats are float32): keep every step in the input's dtype, dtype=x.dtype.")


_CUT = ("A function used in training must let gradients flow: remove @torch.no_grad() or "
        "`with torch.no_grad():` (they are for evaluation and decoding), and .detach(), .data, "
        ".item(), .numpy() or torch.tensor(...) of computed numbers, which cut the graph.")


def _named_grads(probe: Probe, grads: list, roles: tuple) -> list:
    """(the argument, or a module argument's parameter, in words; its gradient) for each gradient."""
    named = []
    for i, grad in zip(probe.grad, grads):
        role = roles[i] if i < len(roles) else f"argument {i + 1}"
        named += ([(f"the {role}'s {k}", g) for k, g in grad.items()] if isinstance(grad, dict) else [(role, grad)])
    return named


def _gradients(decl: Declaration, probe: Probe, found: dict, name: str, what: str, roles: tuple) -> Failure | None:
    """No gradient, NaN in one, or one that differs from the reference's on the same inputs (a graph cut in
    part: a .detach() on one path)."""
    if not found["requires_grad"]:
        return Failure(f"{name} returned {what} without a gradient (requires_grad is False) for inputs "
                       f"that require one, so training could not learn through it. {_CUT}", "no gradient")
    if "error" in found:
        if "modified by an inplace operation" not in found["error"]:
            return Failure(f"the backward pass through {what} of {name} raised RuntimeError: {found['error']}",
                           "no gradient", generic=True)
        return Failure(
            f"the backward pass through {what} of {name} fails: a tensor that the gradient needs was changed in place "
            "after it was used (a method ending in `_`, such as weights.masked_fill_(...) after the softmax, or "
            "`+=`, `/=` on it), so training would stop with \"one of the variables needed for gradient computation "
            "has been modified by an inplace operation\". Use the operation that returns a new tensor: weights = "
            "weights.masked_fill(...).", "a tensor changed in place after use")
    mine = _named_grads(probe, found["grads"], roles)
    for role, grad in mine:
        if grad is None or not grad.any():
            return Failure(f"no gradient reaches {role} through {what} of {name}: part of the computation is "
                           f"cut from the graph. {_CUT}", "no gradient")
        if not grad.isfinite().all():
            return Failure(f"the gradient of {what} of {name} with respect to {role} holds NaN or inf.",
                           "gradients not finite", generic=True)
    with torch.enable_grad():
        theirs = recorder.call(decl.reference, _clone(probe.args), probe.grad, seed=probe.seed).get("gradients", {})
    for (role, grad), (_, ref) in zip(mine, _named_grads(probe, theirs.get("grads", []), roles)):
        precision = "float64" if ref is not None and ref.dtype == torch.float64 else "float32"
        if ref is not None and grad is not None and not _equal(grad, ref, precision):
            return Failure(
                f"the gradient of {what} of {name} with respect to {role} differs from the course's (by up to "
                f"{float((grad.double() - ref.double()).abs().max()):.2g}): part of the computation is cut from "
                "the graph, so training would learn through some paths only. Remove .detach(), .data and "
                "torch.no_grad() from the function.", "a gradient cut in part")
    return None


def _kept_between_calls(first: dict, after: dict, name: str, what: str) -> Failure | None:
    if first["kind"] == after["kind"] == "value" and _difference(after["value"], first["value"]):
        return Failure(
            f"a second call of {name}, on other inputs, changed {what} that the first call had returned, "
            f"from {_short(first['value'], 60)} to {_short(after['value'], 60)}: your function returns "
            f"{_a(first['type'])} it keeps between calls (a global, an attribute, a default argument such as "
            "cache=[]) and changes it, so every caller shares it. Build a new one on every call.",
            "a result kept between calls")

    def tensors(found: dict) -> list:
        return [found] if found["kind"] == "tensor" else [
            f for f in found["items"] if f["kind"] == "tensor"] if found["kind"] == "sequence" else []

    for was, now in zip(tensors(first), tensors(after)):
        if was["shape"] != now["shape"]:
            return Failure(
                f"a second call of {name}, on other inputs, changed the shape of {what} "
                f"that the first call had returned, from {tuple(was['shape'])} to {tuple(now['shape'])}: your "
                "function returns a tensor it keeps between calls (a global buffer, resized "
                "or refilled), so every caller shares it. Create a new tensor on every call.",
                "a result kept between calls")
        if was["values"] is None or now["values"] is None:
            continue
        wrong = _unequal(now["values"], was["values"])
        if wrong.any():
            return Failure(
                f"a second call of {name}, on other inputs, changed {what} that the first call "
                f"had returned ({int(wrong.sum())} of its {wrong.numel()} numbers): your "
                "function writes its result into a tensor it keeps between calls (a global "
                "buffer, a default argument such as out=torch.zeros(...), an attribute) and "
                "returns that tensor, so every caller shares it. Create a new tensor on every "
                "call (torch.zeros(..., dtype=x.dtype) inside the function, or an expression "
                "such as e / e.sum(...)).", "a result kept between calls")
    return None


def _modes_changed(done: dict, name: str, roles: tuple) -> Failure | None:
    for role, before, after in zip(roles, done.get("modes_before", []), done.get("modes_after", [])):
        changed = [n for n, was in before.items() if after.get(n) != was] if before is not None else []
        if changed:
            first = changed[0]
            was = "training" if before[first] else "evaluation"
            now = "training" if after.get(first) else "evaluation"
            module = "the model" if role == "model" else role  # the argument, or its submodule
            module = module if first == "the model" else f"{module}.{first}"
            return Failure(
                f"{name} switched {module} from {was} mode to {now} mode and left it there ({len(changed)} module(s) "
                "changed): whoever called it finds the module in another mode (dropout on or off) for every later "
                "step. Do not call .eval() or .train() in the function; if it must, put the mode back before "
                "returning: was = module.training ... module.train(was).", "a mode changed")
    return None


# ---------------------------------------------------------------- judging one call


def _items(decl: Declaration) -> tuple:
    return decl.returns.items if isinstance(decl.returns, Items) else (decl.returns,)


def _as_items(decl: Declaration, value) -> tuple:
    return tuple(value) if isinstance(decl.returns, Items) else (value,)


def _structure(decl: Declaration, found: dict, name: str) -> list | Failure:
    """The described result as one description per item of the contract."""
    if not isinstance(decl.returns, Items):
        return [found]
    items = found.get("items")
    if found["kind"] == "value" and found["type"] in ("list", "tuple"):  # a plain one: its items as data
        items = [recorder.describe(v) for v in found["value"]]
    if items is not None and found["length"] == len(decl.returns.items):
        return items
    if found["kind"] == "tensor":
        got = f"one tensor of shape {tuple(found['shape'])}"
    elif items is not None:
        kinds = ", ".join("Tensor" if f["kind"] == "tensor" else "NoneType" if f["kind"] == "none" else f["type"]
                          for f in items)
        got = f"a {found['type']} of {found['length']} items ({kinds})"
    else:
        got = "None (a missing `return`?)" if found["kind"] == "none" else found["type"]
    return Failure(f"{name} should return {decl.returns.what}, got {got}", "not the tuple asked for")


class _Candidates:
    """The known mistakes' results on one probe, computed once, when first needed."""

    def __init__(self, decl: Declaration, probe: Probe):
        self.decl, self.probe, self.cache = decl, probe, {}
        self.contracts = _items(decl)
        self.tolerance = [_precision(probe, c) if isinstance(c, (Value, Module)) else
                          p if not isinstance(p, str) and p is not None else "float32"
                          for c, p in ((c, probe.precision or c.precision) for c in self.contracts)]

    def agrees(self, i: int, found: dict, wrong) -> bool:
        """Item ``i`` of the learner's result is the wrong answer's (no tensor's numbers: not known)."""
        if wrong is None or (isinstance(self.contracts[i], Tensor) and found["values"] is None):
            return False
        return _agrees(self.contracts[i], found, wrong, self.tolerance[i])

    def result(self, mistake: Mistake):
        if id(mistake) not in self.cache:
            try:
                with torch.no_grad():
                    wrong = _as_items(self.decl, _plain(_run_on(mistake.like, self.probe)))
                    self.cache[id(mistake)] = _as_data(self.contracts, wrong, self.probe)
            except Exception:  # noqa: BLE001 - a mistake that does not fit this probe's shapes
                self.cache[id(mistake)] = None
        return self.cache[id(mistake)]


_NOT_CODE = {tokenize.COMMENT, tokenize.STRING, *(getattr(tokenize, t) for t in ("FSTRING_START", "FSTRING_MIDDLE",
                                                                              "FSTRING_END") if hasattr(tokenize, t))}


def _code(source: str | None) -> str:
    """The learner's code as a source mistake reads it: its tokens separated by spaces, without
    comments, strings and the names ``def`` gives (``torch . softmax ( x``)."""
    words, after_def = [], False
    try:
        for token in tokenize.generate_tokens(io.StringIO(textwrap.dedent(source or "")).readline):
            if token.type not in _NOT_CODE and not after_def:
                words.append(token.string)
            after_def = token.string == "def"
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass  # a cut source: the tokens read so far
    return " ".join(words)


def _in_code(mistake: Mistake, source: str | None) -> bool:
    return mistake.source is None or bool(re.search(mistake.source, _code(source)))


def source_failure(decl: Declaration, source: str | None) -> Failure | None:
    """The first mistake of stage "source" that the learner's code shows, before any call."""
    for mistake in decl.mistakes:
        found = mistake.stage == "source" and source and re.search(mistake.source, _code(source))
        if found:  # {found}: the code that matched, as written (torch.softmax)
            text = mistake.text(None).replace("{found}", "".join(found.group(0).split()))
            return Failure(text, mistake.name, mistake=mistake)
    return None


def _matches(mistake: Mistake, got: list, candidates: _Candidates, item: int | None,
             source: str | None = None) -> str | None:
    """The message of ``mistake`` if the learner's result is it; for the shape stage, ``item`` is the item
    whose shape is wrong."""
    probe = candidates.probe
    if not mistake.when(probe):
        return None
    if mistake.like is not None:
        wrong = candidates.result(mistake)
        if wrong is None:
            return None
        chosen = mistake.items if mistake.items is not None else range(len(wrong))
        if item is not None and item not in chosen or not all(candidates.agrees(i, got[i], wrong[i]) for i in chosen):
            return None
        return mistake.text(probe)
    if mistake.source is not None and mistake.find is None and mistake.shape is None:
        return mistake.text(probe) if source and _in_code(mistake, source) else None
    if item is not None and mistake.item != item:
        return None
    if mistake.shape is not None:
        return mistake.text(probe) if tuple(got[mistake.item]["shape"]) == tuple(mistake.shape(probe)) else None
    return mistake.find(got[mistake.item], probe) if mistake.find is not None else None


def _raised_like(mistake: Mistake, probe: Probe, err: dict, source: str | None) -> bool:
    """Whether an exception is the one of an "error" mistake: its message matches ``error`` (and the
    code ``source``), or ``like`` raises the same exception with the same message."""
    if mistake.like is None:
        return bool(re.search(mistake.error, err["message"])) and _in_code(mistake, source)
    try:
        _run_on(mistake.like, probe)
    except Exception as theirs:  # noqa: BLE001 - the wrong answer's own exception
        return type(theirs).__name__ == err["type"] and str(theirs) == err["message"]
    return False


def _precision(probe: Probe, contract, wanted=None):
    """The precision of a comparison: the probe's, the contract's, else float32's or float64's
    rounding for a tensor (by the reference's dtype), exact for a plain value."""
    if isinstance(contract, (Value, Module)):
        return probe.precision if isinstance(probe.precision, (int, float)) else contract.precision
    return probe.precision or contract.precision or ("float64" if wanted.dtype == torch.float64 else "float32")


def _explains(decl: Declaration, mistake: Mistake, earlier: list, later: list) -> bool:
    """Whether the wrong answer ``mistake.like`` gives the reference's result on every probe of ``earlier``
    (which the learner passed) and the learner's results on the recorded calls ``later``."""
    for p in earlier:
        try:
            with torch.no_grad():
                right = _as_items(decl, _plain(_run_on(decl.reference, p)))
                wrong = _as_items(decl, _plain(_run_on(mistake.like, p)))
        except Exception:  # noqa: BLE001 - the wrong answer fails where the learner's passed
            return False
        for c, r, w in zip(_items(decl), right, wrong):
            if not (_difference(w, r, _precision(p, c)) is None if isinstance(c, Value) else
                    torch.is_tensor(w) and _equal(w, r, _precision(p, c, r)) if isinstance(c, Tensor) else True):
                return False
    for p, done in later:
        got = _structure(decl, done["result"], "")
        if isinstance(got, Failure):
            return False
        candidates = _Candidates(decl, p)
        wrong = candidates.result(mistake)
        if wrong is None or not all(candidates.agrees(i, got[i], wrong[i]) for i in range(len(wrong))):
            return False
    return True


def _raise_if(failure: Failure | None) -> None:
    if failure:
        raise failure


def _named(mistake: Mistake, text: str, name: str) -> Failure:
    return Failure((mistake.prefix + text).replace("{name}", name), mistake.name, mistake.generic, mistake)


def judge(decl: Declaration, probe: Probe, done: dict, name: str, signature, reference=None,
          source: str | None = None, earlier: list = (), later: list = ()) -> None:
    """Raise :class:`Failure` with the first thing wrong in one recorded call (``done``, from
    :func:`record.call`) of the learner's function ``name``. ``reference``: the course's result, if computed.
    With ``decl.consistent``, a mistake by ``like`` is named only where it passes the probes ``earlier`` and
    gives the learner's results on ``later`` ((probe, record) of the later calls of the same set of sizes)."""
    args, roles = probe.args, decl.roles
    if "raised" in done:
        err = done["raised"]
        if probe.error is not None and probe.again is None and err["type"] == probe.error:
            return
        if err["type"] != "NotImplementedError":
            for m in decl.mistakes:
                if m.stage == "error" and m.when(probe) and _raised_like(m, probe, err, source):
                    raise Failure(m.text(probe), m.name, mistake=m)
        raise _exception(err, name, args, probe, done, signature, roles)
    if probe.error is not None and probe.again is None:
        raise Failure(probe.no_error(name), f"no {probe.error} raised")
    changed = _changed(args, done, signature, roles, probe.each)
    if changed:
        raise Failure(f"{name} changed {changed[0]}. {decl.in_place or changed[1]}", "an input changed in place")
    _raise_if(_modes_changed(done, name, roles))  # before the numbers, which another mode changes
    contracts = _items(decl)
    got = _structure(decl, done["result"], name)
    if isinstance(got, Failure):
        raise got
    # What the arguments kept of their calls, and what the second call (``again``) returned.
    got = [dict(f, calls=done.get("calls_of"), again=done.get("again_result")) for f in got]
    whats = [c.label or c.what for c in contracts]
    for contract, found in zip(contracts, got):
        _raise_if(_contract(contract, found, args[-1] if probe.chain is not None else args, name, contract.what))
    if reference is None:
        with torch.no_grad():
            reference = _plain(_run_on(decl.reference, probe))
    expected = _as_data(contracts, _as_items(decl, reference), probe)
    candidates = _Candidates(decl, probe)
    mistakes = decl.mistakes if probe.mistakes else ()
    if decl.consistent:
        mistakes = [m for m in mistakes if m.like is None or _explains(decl, m, earlier, later)]
    right = None  # whether the learner's result is the reference's, once an "always" like asks
    for mistake in (m for m in mistakes if m.stage == "always"):
        if mistake.like is not None and right is None:
            right = all(_agrees(c, f, w, _precision(probe, c, w)) for c, f, w in zip(contracts, got, expected))
        text = None if mistake.like is not None and right else _matches(mistake, got, candidates, None, source)
        if text:
            raise _named(mistake, text, name)
    for i, (found, wanted, what) in enumerate(zip(got, expected, whats)):
        if isinstance(contracts[i], (Value, Module)) or tuple(found["shape"]) == tuple(wanted.shape):
            continue
        mistake, text = next(((m, t) for m in mistakes if m.stage == "shape"
                              and (t := _matches(m, got, candidates, i, source))), (None, None))
        hint = (f" {mistake.prefix}{text}".replace("{name}", name) if mistake
                else _squeezed(found["shape"], wanted.shape))
        raise Failure(f"wrong shape for {probe.text(name, what)}: expected {tuple(wanted.shape)}, got "
                      f"{tuple(found['shape'])}.{hint}", mistake.name if mistake else "the wrong shape",
                      generic=True, mistake=mistake)
    if probe.compare and not (probe.accept is not None and probe.accept([_read(c, f) for c, f in zip(contracts, got)])):
        precision = [_precision(probe, c, w) for c, w in zip(contracts, expected)]
        if not all(_agrees(c, f, w, p) for c, f, w, p in zip(contracts, got, expected, precision)):
            coarse = (any(torch.is_tensor(w) and w.dtype == torch.float64 for w in expected)
                      and all(_agrees(c, f, w, "float32") for c, f, w in zip(contracts, got, expected)))
            for mistake in () if coarse else (m for m in mistakes if m.stage == "value"):
                text = _matches(mistake, got, candidates, None, source)
                if text:
                    raise _named(mistake, text, name)
            for contract, found, wanted, what, p in zip(contracts, got, expected, whats, precision):
                label = probe.text(name, what)
                if _agrees(contract, found, wanted, p):
                    continue
                if isinstance(contract, Value):
                    got_value = _read(contract, found)
                    raise Failure(f"mismatch in {label}: {_difference(got_value, wanted, p)}.\n  yours:    "
                                  f"{_short(got_value, 300)}\n  expected: {_short(wanted, 300)}", "wrong values",
                                  generic=True)
                if isinstance(contract, Module):
                    raise Failure(f"{label}: {_module_difference(found, wanted)}", "another module", generic=True)
                if coarse:
                    raise Failure(_float32_precision(found["values"], wanted, label), "float32 precision",
                                  generic=True)
                mismatch = contract.mismatch or _default_mismatch
                raise Failure(mismatch(found["values"], wanted, label), "wrong values", generic=True)
    whole = decl.returns.again_what if isinstance(decl.returns, Items) else decl.returns.what
    if probe.grad:
        _raise_if(_gradients(decl, probe, done["gradients"], name, whole, roles))
    err = done.get("again_raised")  # of the second call, ``again``
    if probe.again is not None and probe.error is not None and err is None:  # it had to raise
        raise Failure(probe.no_error(name), f"no {probe.error} raised")
    if err is not None and (probe.error is None or err["type"] == "NotImplementedError"):
        raise _exception(err, name, probe.again, probe, {}, signature, roles)
    if err is not None and err["type"] != probe.error:
        raise Failure(probe.on_error(err, name), f"an exception ({err['type']})")
    if probe.again is not None and probe.error is None:
        _raise_if(_kept_between_calls(done["result"], done["first_after"], name, probe.again_what or whole))


def _with_sizes_hint(failure: Failure, passed: list, sizes: dict | None, fix: str | Callable) -> Failure:
    """A failure no known mistake explains, after whole sets of sizes passed, blames a size written into the
    code. ``fix``: how to read a size instead, or (sets passed, set failed, message) -> the hint, or None."""
    if not failure.generic or not passed or sizes is None or sizes in passed:
        return failure
    message = str(failure)
    hint = fix(passed, sizes, message) if callable(fix) else None
    if hint is None:
        hint = _hard_coded_hint(passed, sizes, message, "" if callable(fix) else fix)
    name = failure.mistake.name if failure.mistake else "a size written into the code?"
    return Failure(message + hint, name, generic=True, mistake=failure.mistake)


def _judge_all(decl: Declaration, probes: list, records: list, name: str, signature, source, fn=None):
    """The first failure of the recorded calls, judged in order (in a notebook, ``fn`` is called on a probe
    not recorded yet), with the hint of a size written into the code where whole sets of sizes passed
    before it. With ``decl.errors_first``, a later recorded call of the same set that raised is reported
    before the wrong numbers of this one (as a check that calls a whole set first)."""
    left = {}  # the calls of each set of sizes not judged yet
    for p in probes:
        if p.sizes is not None:
            left[repr(p.sizes)] = left.get(repr(p.sizes), 0) + 1
    sets_passed, passed = [], []
    for k, probe in enumerate(probes):
        if k == len(records):
            if fn is None:  # the grader's record stops here
                break
            records.append(_recorded(fn, probe))
        done, same_set = records[k], [j for j in range(k + 1, len(records)) if probes[j].sizes is not None
                                      and probes[j].sizes == probe.sizes]
        try:
            try:
                judge(decl, probe, done, name, signature, source=source, earlier=passed,
                      later=[(probes[j], records[j]) for j in same_set if "raised" not in records[j]])
            except Failure:
                for j in same_set if decl.errors_first and "raised" not in done else ():
                    if "raised" in records[j]:
                        judge(decl, probes[j], records[j], name, signature, source=source)
                raise
        except Failure as failure:
            failed = _with_sizes_hint(failure, sets_passed, probe.sizes, decl.sizes_fix)
            failed.__cause__ = done.get("_error")  # the learner's exception, kept for a debugger
            return failed
        if probe.sizes is not None:
            left[repr(probe.sizes)] -= 1
            if left[repr(probe.sizes)] == 0:
                sets_passed.append(probe.sizes)
        passed.append(probe)
    return None


# ---------------------------------------------------------------- in a notebook


def run(decl: Declaration, fn, device: str | None = None) -> str:
    """The check in a notebook: call ``fn`` on each probe (``device``: the other device the
    probes try, None for none) and judge it, in the kernel; raise :class:`Failure` at the first
    thing wrong, else return the line that says it passed."""
    name = _function(fn, decl.check, decl.function)
    signature = recorder.parameters(fn)
    source = recorder.origin(fn)["source"] if any(m.source for m in decl.mistakes) else None
    _raise_if(source_failure(decl, source))
    with torch.random.fork_rng(devices=[]):
        probes = decl.probes(device)
        records = []
        for probe in probes if decl.consistent else ():  # all recorded first, as by the grader: the later calls count
            records.append(_recorded(fn, probe))
            if "raised" in records[-1]:
                break
        failure = _judge_all(decl, probes, records, name, signature, source, fn)
    _raise_if(failure)
    return passed_line(decl, name)


def _recorded(fn, probe: Probe) -> dict:
    return recorder.call(fn, _clone(probe.args), probe.grad, None if probe.again is None else _clone(probe.again),
                         probe.seed, _clone(probe.on), probe.each, probe.chain, probe.fills)


def passed_line(decl: Declaration, name: str) -> str:
    return decl.passed(name) if callable(decl.passed) else decl.passed.replace("{name}", name)


def check(decl: Declaration, fn, device: str | None = None) -> None:
    """``check_...(fn)``: print the line that says it passed, or raise the failure. ``device``: the other
    device the probes try (in a notebook, the GPU where there is one; the grader and the tests use 'meta')."""
    print(run(decl, fn, device))


# ---------------------------------------------------------------- in the grader


GRADER_DEVICE = "meta"  # the other device of the grader's probes: every machine has it


def plan(decl: Declaration) -> tuple[list, dict]:
    """The grader's probes and what the kernel is sent: each call's arguments as data."""
    with torch.random.fork_rng(devices=[]):
        probes = decl.probes(GRADER_DEVICE)

    def encoded(args):
        return None if args is None else [recorder.encode(a) for a in args]
    calls = [{"args": encoded(p.args), "grad": list(p.grad), "each": p.each, "again": encoded(p.again),
              "seed": p.seed, "on": encoded(p.on), "chain": p.chain, "fills": p.fills} for p in probes]
    return probes, {"calls": calls}


@dataclass
class Verdict:
    verdict: str          # passed, failed, not attempted, error, defined outside
    diagnosis: str = ""
    mistake: str = ""     # the mistake in a few words, without the fix


def judge_record(decl: Declaration, probes: list, record: dict) -> Verdict:
    """The verdict on a submission's record (:func:`record.record_file`), judged here, in the
    grader's process, against the reference and the known mistakes."""
    if "missing" in record:
        return Verdict("error", record["missing"], "not defined")
    source = (record.get("origin") or {}).get("source")
    source = source if isinstance(source, str) else None
    failure = source_failure(decl, source)
    if failure:
        return Verdict("failed", str(failure), failure.name)
    calls = record["calls"]
    with torch.random.fork_rng(devices=[]):
        failure = _judge_all(decl, probes, calls, record["name"], record["signature"], source)
    if failure:
        return Verdict("not attempted" if failure.name == "not done" else "failed", str(failure), failure.name)
    if len(calls) < len(probes):
        return Verdict("error", "the record stops before the last call (the kernel's record was cut short)",
                       "no record")
    return Verdict("passed")


def defined_outside(record: dict) -> str | None:
    """Why the graded function is not the notebook's own, or None: its code is not a cell of the
    notebook (imported from the package, from solutions/ or from another file)."""
    where = record.get("origin")
    if not where or where.get("cell"):
        return None
    module, file = where.get("module") or "?", where.get("file")
    source = f"{module}.{where.get('qualname', '?')}" + (f", from {file}" if file else "")
    return (f"`{record['function']}` is not defined in the notebook: it is {source}. The function "
            "graded must be written in its exercise's cell (no pass for one imported or copied in)")


__all__ = ["Declaration", "Failure", "Items", "Mistake", "Module", "Probe", "Tensor", "Value", "Verdict", "check",
           "defined_outside", "judge", "judge_record", "plan", "run"]


def _call(fn, *args, hints: tuple = (), roles: tuple = ()):
    """Call the learner's function outside a declared check: an exception, or an input changed in place, is
    reported as the engine reports it. ``hints``: (pattern, hint) pairs for an exception's message;
    ``roles`` name the arguments (query, key, ...)."""
    name, params = getattr(fn, "__name__", "your function"), recorder.parameters(fn)
    was, done = _clone(args), {"layout_before": [recorder._layout(a) for a in args]}
    try:
        result = fn(*args)
    except (Exception, SystemExit) as err:  # SystemExit: exit() or sys.exit() in the function
        done["inputs_after"] = [recorder._after(a) for a in args]
        probe = Probe(was, "", hints=hints)
        raise _exception(recorder.exception(err), name, was, probe, done, params, roles) from err
    done["inputs_after"] = [recorder._after(a) for a in args]
    changed = _changed(was, done, params, roles)
    if changed:
        raise ExerciseFailed(f"{name} changed {changed[0]}. {changed[1]}")
    return result
