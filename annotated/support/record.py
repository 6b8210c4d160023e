"""What a learner's function does on the inputs of a check, written down as data.

The course's declared checks (``annotated.support.grading.engine``) never judge a function
where it runs: this module calls it on the probe inputs and describes what happened (the result,
as tensors, plain values, a module's shapes and type names; an exception, as its type, message
and line; the inputs as they are after the call; gradients; a first result after a second call,
and the second's; the training flags of module arguments; what an argument made by ``build``
kept of its calls), and the engine judges the description. In a notebook both happen in the
kernel; when the grader grades a submission, this module runs in the submission's kernel,
writes the description to a file (``record_file``), and the grader judges it in its own
process, where nothing the notebook redefined (torch, the checks, this module) can change the
verdict. The probe inputs travel the other way as data too (``encode``, ``decode``): tensors,
dicts, modules and functions by their recipe (``build``) or their name under annotated or torch.

A description holds only dicts, lists, tuples, strings, numbers, bools, None and plain CPU
tensors: what ``torch.load(..., weights_only=True)`` reads back without running any code of the
file's. Kept light: it imports torch and the standard library only (``decode`` imports the
module a recipe names).
"""

import functools
import importlib
import inspect
import linecache
import os
import re
import traceback

import torch

_TORCH_DIR = os.path.dirname(torch.__file__)
_NAMED_PARAMETERS = torch.nn.Module.named_parameters  # as it was when the recorder was set up
MAX_NUMEL = 50_000_000  # a result larger than this is described without its numbers
_CELL = re.compile(r"(^<ipython-input-\d+-[0-9a-f]+>$)|([/\\]ipykernel_\d+[/\\]\d+\.py$)")


# ---------------------------------------------------------------- values as data


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


_PLAIN = (bool, int, float, str)  # in this order: a bool is an int too
MAX_PLAIN = 100_000  # a plain result of more numbers and strings than this is described as before, in part
MAX_CHARS = 1_000_000  # the characters of all its strings together
_NOT_PLAIN = object()


def _plain(value, budget: list):
    """``value`` as built-in bools, ints, floats, strings, None, lists, tuples and dicts (a NumPy
    float64 or a str subclass becomes its built-in base; a set of plain items the sorted list of
    them), or None when it holds anything else or more than the budget ([numbers and strings
    left, characters left])."""
    if value is None:
        return value
    for kind in _PLAIN:
        if isinstance(value, kind):
            budget[0] -= 1
            budget[1] -= len(value) if kind is str else 0
            return kind(value) if budget[0] >= 0 and budget[1] >= 0 else _NOT_PLAIN
    if isinstance(value, (set, frozenset)):  # a set as the sorted list of its items (describe says it was a set)
        items = [_plain(item, budget) for item in value]
        return _NOT_PLAIN if any(item is _NOT_PLAIN or not _key(item) for item in items) else sorted(items, key=repr)
    if type(value) in (list, tuple) or isinstance(value, dict):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        out = {}
        for key, item in items:
            out[key] = _plain(item, budget)
            if out[key] is _NOT_PLAIN or not _key(key):
                return _NOT_PLAIN
        return out if isinstance(value, dict) else type(value)(out.values())
    return _NOT_PLAIN


def _key(key) -> bool:
    """A dict key that travels as data: a bool, number or string, or a tuple of them (BPE's symbols)."""
    return isinstance(key, _PLAIN) or (type(key) is tuple and all(isinstance(k, _PLAIN) for k in key))


def _kind(value) -> str:
    if isinstance(value, (set, frozenset)):
        return "set"
    return next((k.__name__ for k in (*_PLAIN, list, tuple, dict) if isinstance(value, k)), type(value).__name__)


def describe(value, depth: int = 0, on: tuple | None = None) -> dict:
    """``value`` as data: a tensor with its dtype, device, layout, shape, whether it requires grad
    and its numbers (a dense CPU copy; none for 'meta' or huge tensors); a plain value (bools,
    numbers, strings, None, and lists, tuples and dicts of them, up to ``MAX_PLAIN`` numbers and
    strings) as itself, with its built-in type and its own class (a set as its items sorted, type
    "set"); another tuple or list with its
    first 32 items (given ``on``, item k's module called on ``on[k]``; with every parameter of the modules
    it holds, ``tensors``: see :func:`_tensors`); a module by its class, its parameters' shapes, its mode
    and, given ``on``, the output of calling it on those arguments (``inputs``), in evaluation mode (its
    modes put back after: a dropout draws nothing); a dict that is not plain with its first 32 entries
    (``entries``); anything else by its type (and its value, for a NumPy number; its shape and dtype, for
    a NumPy array or number)."""
    if value is None:
        return {"kind": "none"}
    if torch.is_tensor(value):
        found = {"kind": "tensor", "dtype": _dtype_name(value.dtype), "device": str(value.device),
                 "layout": str(value.layout).replace("torch.", ""), "shape": list(value.shape),
                 "requires_grad": bool(value.requires_grad), "values": None}
        if value.device.type != "meta" and value.numel() <= MAX_NUMEL:
            values = value.detach()
            if values.layout != torch.strided:
                values = values.to_dense()
            found["values"] = values.as_subclass(torch.Tensor).to("cpu").clone().contiguous()
        return found
    plain = _plain(value, [MAX_PLAIN, MAX_CHARS])
    if plain is not _NOT_PLAIN:
        found = {"kind": "value", "type": _kind(value), "class": type(value).__name__, "value": plain}
        if isinstance(value, (list, tuple, dict, str, set, frozenset)):
            found["length"] = len(value)
        return found
    if isinstance(value, (tuple, list)) and depth < 4:
        tensors = _tensors(value)  # as returned: before describing the items calls any module of them
        found = {"kind": "sequence", "type": type(value).__name__, "length": len(value),
                 "items": [describe(item, depth + 1, None if on is None or k >= len(on) else on[k])
                           for k, item in enumerate(list(value)[:32])]}
        return found | {"tensors": tensors} if tensors else found
    found = {"kind": "object", "type": type(value).__name__, "module": type(value).__module__}
    if isinstance(value, torch.nn.Module):  # a module by its class, its parameters' shapes and its mode
        found |= {"kind": "module", "training": bool(value.training),
                  "parameters": {n: list(t.shape) for n, t in _NAMED_PARAMETERS(value)}}
        if on is not None:
            modes = [(m, m.training) for m in value.modules()]
            try:
                with torch.no_grad():
                    found["outputs"] = describe(value.eval()(*on))
            except Exception as err:  # noqa: BLE001 - the learner's module fails on the probe's input
                found["outputs_raised"] = exception(err)
            finally:
                for m, training in modes:
                    m.training = training
            found["inputs"] = [describe(a) for a in on]
    if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0:
        found["value"] = _plain(value.item(), [1, 200])  # a NumPy number
    if type(value).__module__ == "numpy" and getattr(value, "ndim", 0) > 0 and hasattr(value, "dtype"):  # an array
        found |= {"shape": list(value.shape), "dtype": str(value.dtype)}
    if isinstance(value, dict) and depth < 4:  # a dict of tensors or NumPy numbers: entry by entry
        found["entries"] = {k: describe(v, depth + 1) for k, v in list(value.items())[:32] if _key(k)}
    try:
        found["length"] = len(value)
    except Exception:  # noqa: BLE001 - anything without a length, or whose __len__ fails
        pass
    return found


MAX_PARAMETER = 1_000_000  # a parameter larger than this is described without its numbers


def _tensors(value) -> list:
    """Every parameter of the modules in ``value`` (tuples and lists of them, nested), in order, as data:
    ``item`` (the indices that lead to its module), ``name``, ``shape``, ``requires_grad``, ``values`` (a
    CPU copy; None on 'meta' or past ``MAX_PARAMETER``), ``same`` (the index in this list of the first that
    is the same Parameter object: tied weights) and ``memory`` (of the first whose storage begins at the
    same address: a second Parameter over the same tensor)."""
    found, objects, where = [], [], []

    def walk(v, item: list, depth: int) -> None:
        if isinstance(v, torch.nn.Module):
            for name, t in _NAMED_PARAMETERS(v):  # torch's, not what the instance says of itself
                address = t.data_ptr() if t.device.type != "meta" and t.numel() else None
                same = next((i for i, o in enumerate(objects) if o is t), len(objects))
                memory = next((i for i, a in enumerate(where) if a is not None and a == address), len(objects))
                keep = t.device.type != "meta" and t.numel() <= MAX_PARAMETER
                found.append({"item": item, "name": name, "shape": list(t.shape),
                              "requires_grad": bool(t.requires_grad), "same": same, "memory": memory,
                              "values": t.detach().to("cpu").clone() if keep else None})
                objects.append(t)
                where.append(address)
        elif isinstance(v, (tuple, list)) and depth < 4:
            for k, x in enumerate(list(v)[:32]):
                walk(x, item + [k], depth + 1)

    walk(value, [], 0)
    return found


# ---------------------------------------------------------------- arguments as data

_IMPORTABLE = ("annotated.", "torch.")  # where a module or a function argument may come from


def _imported(path: str):
    """The object of the dotted ``path`` (a module's attribute, or one of its classes' own)."""
    if not path.startswith(_IMPORTABLE):
        raise ValueError(f"a probe's argument comes from annotated or torch only, not {path!r}")
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            found = getattr(found, name)
        return found
    raise ImportError(path)


def build(path: str, /, **kwargs):
    """``path(**kwargs)``, a module or a function a factory returns (a ``sample`` that draws
    from a seeded generator), that remembers how it was built: :func:`encode` sends it as that
    recipe (a module with its parameters and buffers, whether each requires grad, and each
    submodule's training flag), and :func:`decode` builds it again in the kernel. What it
    keeps in a list ``calls`` (what it was called with) is recorded after each call."""
    made = _imported(path)(**kwargs)
    made._recipe = {"build": path, "kwargs": kwargs}
    if isinstance(getattr(made, "calls", None), list):
        _KEPT[id(made)] = (made, made.calls)  # the list itself: a learner's `made.calls = ...` changes nothing
        if getattr(made, "calls_hidden", False):
            del made.calls  # and, where its own code does not need it, nothing to change in place
    return made


_KEPT = {}  # id -> (what build made, the list of its calls as built)


def _path(fn) -> str | None:
    """The dotted name under which ``fn`` is found (torch's own functions by their module and name)."""
    module = getattr(fn, "__module__", None)
    for name in (getattr(fn, "__qualname__", None), getattr(fn, "__name__", None)):
        try:
            if module and name and _imported(f"{module}.{name}") is fn:
                return f"{module}.{name}"
        except (ValueError, ImportError, AttributeError):
            pass
    return None


def encode(value):
    """An argument of a probe as data: a tensor with its layout in memory (the numbers of the
    part of its storage it spans, its strides and offset), so that a transposed view arrives as
    one; on 'meta' by its shape and dtype alone. A module or a function made by :func:`build`
    by its recipe (a module with its weights, and the names that share one: tied weights); a
    function of annotated or torch by its dotted name (a functools.partial of
    one with its arguments); a dict with its keys as they are (strings, numbers)."""
    recipe = getattr(value, "_recipe", None)
    if recipe is not None:
        found = {"build": recipe["build"], "kwargs": encode(recipe["kwargs"])}
        if isinstance(value, torch.nn.Module):
            names: dict = {}  # a tensor held under several names (tied weights): its names, to tie them again
            for k, v in value.state_dict(keep_vars=True).items():
                names.setdefault(id(v), []).append(k)
            found |= {"state": {k: encode(v) for k, v in value.state_dict().items()},
                      "requires_grad": {n: t.requires_grad for n, t in value.named_parameters()},
                      "training": {n: m.training for n, m in value.named_modules()},
                      "tied": [group for group in names.values() if len(group) > 1]}
        return found
    if isinstance(value, functools.partial) and _path(value.func):
        return {"call": _path(value.func), "args": encode(value.args), "kwargs": encode(value.keywords)}
    if callable(value) and not isinstance(value, torch.nn.Module) and _path(value):
        return {"call": _path(value)}
    if torch.is_tensor(value):
        found = {"shape": list(value.shape), "dtype": _dtype_name(value.dtype), "device": str(value.device),
                 "requires_grad": bool(value.requires_grad), "tensor": torch.zeros(0), "stride": None}
        if value.device.type != "meta":
            value = value.detach().to("cpu")
            if value.is_contiguous() or value.numel() == 0 or min(value.stride(), default=1) < 0:
                found["tensor"] = value.contiguous().clone()
            else:
                span = 1 + sum((n - 1) * s for n, s in zip(value.shape, value.stride()))
                found["tensor"] = value.as_strided((span,), (1,)).clone()
                found["stride"] = list(value.stride())
        return found
    if isinstance(value, torch.dtype):
        return {"torch_dtype": _dtype_name(value)}
    if isinstance(value, torch.device):
        return {"torch_device": str(value)}
    if isinstance(value, (tuple, list)):
        return {"sequence": type(value).__name__, "items": [encode(v) for v in value]}
    if isinstance(value, dict):
        return {"mapping": {k: encode(v) for k, v in value.items()}}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"a probe's argument cannot be sent as data: {type(value).__name__} (a module or a function: "
                    "make it with record.build, or name a function of annotated or torch)")


def decode(value):
    """The argument :func:`encode` wrote."""
    if not isinstance(value, dict):
        return value
    if "tensor" in value:
        dtype = getattr(torch, value["dtype"])
        if value["device"] == "meta":
            tensor = torch.empty(value["shape"], dtype=dtype, device="meta")
        elif value.get("stride") is not None:
            tensor = value["tensor"].to(dtype).clone().as_strided(value["shape"], value["stride"])
        else:
            tensor = value["tensor"].to(dtype).reshape(value["shape"]).clone().to(value["device"])
        return tensor.requires_grad_() if value.get("requires_grad") else tensor
    if "torch_dtype" in value:
        return getattr(torch, value["torch_dtype"])
    if "torch_device" in value:
        return torch.device(value["torch_device"])
    if "sequence" in value:
        items = [decode(v) for v in value["items"]]
        return tuple(items) if value["sequence"] == "tuple" else items
    if "mapping" in value:
        return {k: decode(v) for k, v in value["mapping"].items()}
    if "call" in value:
        fn = _imported(value["call"])
        return functools.partial(fn, *decode(value["args"]), **decode(value["kwargs"])) if "args" in value else fn
    if "build" in value:
        made = build(value["build"], **decode(value["kwargs"]))
        if isinstance(made, torch.nn.Module):
            made.load_state_dict({k: decode(v) for k, v in value["state"].items()}, assign=True)
            for first, *others in value.get("tied", []):  # assign=True made one tensor per name: one again
                shared = made.get_parameter(first) if first in dict(made.named_parameters()) else made.get_buffer(
                    first)
                for name in others:
                    owner, _, attribute = name.rpartition(".")
                    setattr(made.get_submodule(owner), attribute, shared)
            for n, t in made.named_parameters():
                t.requires_grad_(value["requires_grad"][n])
            for n, m in made.named_modules():
                m.training = value["training"][n]
        return made
    raise ValueError(f"not an encoded argument: {sorted(value)}")


# ---------------------------------------------------------------- one call


def _layout(arg) -> list | None:
    if type(arg) is tuple:  # the arguments of one call of an ``each`` probe, one by one
        return [_layout(a) for a in arg]
    return [list(arg.stride()), int(arg.storage_offset())] if torch.is_tensor(arg) and arg.layout == torch.strided \
        else None


def _after(arg) -> dict | None:
    """A tensor argument after the call: its shape, dtype, layout and numbers; a list or dict
    argument (a plain value, which a call can change in place) as its value; a tuple (the arguments of
    one call of an ``each`` probe) as its items', ``items``."""
    if type(arg) is tuple:
        return {"items": [_after(a) for a in arg]}
    if isinstance(arg, (list, dict)):
        plain = _plain(arg, [MAX_PLAIN, MAX_CHARS])
        return None if plain is _NOT_PLAIN else {"value": plain, "class": type(arg).__name__}
    if not torch.is_tensor(arg):
        return None
    found = {"shape": list(arg.shape), "dtype": _dtype_name(arg.dtype), "layout": _layout(arg), "values": None}
    if arg.device.type != "meta" and arg.layout == torch.strided and arg.numel() <= MAX_NUMEL:
        found["values"] = arg.detach().as_subclass(torch.Tensor).to("cpu").clone()
    return found


def _modes(arg) -> dict | None:
    """The training flag of a module argument and of each of its submodules, by name."""
    if not isinstance(arg, torch.nn.Module):
        return None
    return {n or "the model": bool(m.training) for n, m in arg.named_modules()}


def exception(err: BaseException) -> dict:
    """An exception of the learner's code as data: its type (and whether it is a TypeError), its
    message, the line of the learner's code it came from, and how deep the call had gone."""
    frames = traceback.extract_tb(err.__traceback__)
    mine = [f for f in frames[1:] if not f.filename.startswith(_TORCH_DIR) and f.filename != __file__]
    last = mine[-1] if mine else None
    return {"type": type(err).__name__, "message": str(err), "call": getattr(err, "_each_call", None),
            "type_error": isinstance(err, TypeError), "system_exit": isinstance(err, SystemExit),
            "frames": 1 + sum(f.filename != __file__ for f in frames[1:]), "inner": last.name if last else None,
            "where": [last.name, last.lineno, (last.line or "").strip()] if last else None}


def _flat(result) -> list:
    if torch.is_tensor(result):
        return [result]
    if isinstance(result, (tuple, list)):
        return [t for t in result if torch.is_tensor(t)]
    return []


def _gradients(result, leaves: list) -> dict:
    """Whether the result requires grad, and the gradient of a fixed weighted sum of it with
    respect to each leaf (``torch.autograd.grad``: no ``.grad`` changes): a tensor, or a module,
    whose gradients are a dict, parameter name -> gradient."""
    named = [{n: t for n, t in leaf.named_parameters() if t.requires_grad} if isinstance(leaf, torch.nn.Module)
             else {None: leaf} for leaf in leaves]
    tensors = _flat(result)
    if not any(t.requires_grad for t in tensors):
        return {"requires_grad": False}
    total = 0
    for t in tensors:
        if t.requires_grad and t.is_floating_point():
            weights = torch.arange(t.numel(), dtype=t.dtype, device=t.device) % 7 - 3
            total = total + (t * weights.view(t.shape)).sum()
    try:
        grads = iter(torch.autograd.grad(total, [t for n in named for t in n.values()], allow_unused=True))
    except RuntimeError as err:
        return {"requires_grad": True, "error": str(err)}
    found = [{k: None if g is None else g.detach().to("cpu").clone() for k, g in zip(n, grads)} for n in named]
    return {"requires_grad": True, "grads": [g[None] if None in g else g for g in found]}


def _calls(arg) -> dict | None:
    """What an argument made by :func:`build` kept of its calls (its list ``calls``), as data."""
    made, calls = _KEPT.get(id(arg), (None, None))
    if made is not arg:
        calls = getattr(arg, "calls", None) if hasattr(arg, "_recipe") else None
    return describe(list(calls)) if isinstance(calls, list) else None


def _filling(fn, fills: tuple):
    """``fn`` whose result is (what it returned, what it left in its dict argument ``fills[0]`` under each
    key of ``fills[1]``): a cache it fills in place. A key left out comes as {"missing": key, "holds": the
    dict's keys}."""
    index, keys = fills

    def filled(*args):
        result, box = fn(*args), args[index]
        if not isinstance(box, dict):
            return (result, *({"missing": key, "holds": None} for key in keys))
        return (result, *(box[key] if key in box else {"missing": key, "holds": sorted(map(str, box))}
                          for key in keys))
    return filled


def _each(fn, chain: int | None = None):
    """``fn`` called on each of its arguments, a tuple of arguments per call: the list of its results (an
    exception says which call raised it). ``chain``: every call after the first gets the first call's
    argument ``chain`` instead of its own, as the calls before left it (a cache they fill in turn), and
    the result is the last call's alone."""
    def calls(*arguments):
        results = []
        for i, args in enumerate(arguments):
            if chain is not None and i:
                args = (*args[:chain], arguments[0][chain], *args[chain + 1:])
            try:
                results.append(fn(*args))
            except BaseException as err:
                err._each_call = i
                raise
        return results[-1] if chain is not None and results else results
    return calls


def call(fn, args: tuple, grad: tuple = (), again: tuple | None = None, seed: int | None = None,
         on: tuple | None = None, each: bool = False, chain: int | None = None, fills: tuple | None = None) -> dict:
    """Call ``fn(*args)`` and describe what happened. ``grad``: the arguments made to require
    grad, whose gradients are recorded; ``again``: the arguments of a second call, after which
    the first result is described once more (a function that keeps its result between calls
    changes it). A module in ``grad``: the gradients of its parameters that require grad are
    recorded; an argument made by :func:`build` that keeps a list ``calls`` has it recorded.
    ``seed``: the global generator's seed before each call (what it was is put back after), so
    that a function drawing from it (F.dropout) draws what the check can draw again. ``on``: the
    arguments a module the function returns is called on (its output is described). ``each``: every
    argument is the arguments of one call, and the result is the list of the calls' results (``chain``:
    the last call's, the calls sharing one argument: :func:`_each`). ``fills``: (argument, keys), what
    each call left in that dict argument joins its result (:func:`_filling`)."""
    fn = _filling(fn, fills) if fills is not None else fn
    with torch.random.fork_rng(devices=[], enabled=seed is not None):
        return _call(_each(fn, chain) if each else fn, list(args), grad, again, seed, on)


def _call(fn, args: list, grad: tuple, again: tuple | None, seed: int | None, on: tuple | None) -> dict:
    if seed is not None:
        torch.manual_seed(seed)
    for i in grad:
        if not isinstance(args[i], torch.nn.Module):
            args[i] = args[i].detach().requires_grad_()
    record = {"layout_before": [_layout(a) for a in args], "modes_before": [_modes(a) for a in args]}
    try:
        result = fn(*args)
    except (Exception, SystemExit) as err:  # SystemExit: exit() or sys.exit() in the function
        record["raised"] = exception(err)
        record["inputs_after"] = [_after(a) for a in args]
        record["_error"] = err  # in a notebook, the cause of the check's failure (not written to a file)
        return record
    record["inputs_after"] = [_after(a) for a in args]
    record["modes_after"] = [_modes(a) for a in args]
    record["calls_of"] = [_calls(a) for a in args]
    record["result"] = describe(result, on=on)
    if grad:
        record["gradients"] = _gradients(result, [args[i] for i in grad])
    if again is not None:
        if seed is not None:
            torch.manual_seed(seed)
        try:
            second = fn(*again)
        except (Exception, SystemExit) as err:
            record["again_raised"] = exception(err)
        else:
            record["first_after"], record["again_result"] = describe(result), describe(second)
    return record


# ---------------------------------------------------------------- where the function comes from


def parameters(fn) -> list[str] | None:
    """The names of the positional parameters of ``fn``; None without a signature."""
    try:
        return [p.name for p in inspect.signature(fn).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return None


def origin(fn) -> dict:
    """Where ``fn`` was defined: its module, the file of its code, whether that file is a cell of
    this kernel (IPython's name for a cell's code) and its source (the grader looks for it in
    the notebook's cells). A decorator (functools.wraps, lru_cache,
    torch.no_grad) and functools.partial are seen through; an object with __call__ is known by its
    class."""
    target = fn
    for _ in range(20):
        if isinstance(target, functools.partial):
            target = target.func
        elif getattr(target, "__wrapped__", None) is not None:
            target = target.__wrapped__
        else:
            break
    code = getattr(target, "__code__", None)
    if code is None and not isinstance(target, type) and not inspect.isbuiltin(target):
        code = getattr(getattr(type(target), "__call__", None), "__code__", None)
    file = code.co_filename if code is not None else None
    module = getattr(target, "__module__", None) or type(target).__module__
    try:
        source = inspect.getsource(target)[:20_000]
    except (OSError, TypeError):
        source = None
    return {"module": module, "file": file, "qualname": getattr(target, "__qualname__", type(target).__name__),
            "cell": bool(file and _CELL.search(file) and file in linecache.cache), "source": source}


# ---------------------------------------------------------------- in the grader's kernel


def record_file(namespace: dict, function: str, plan_path: str, out_path: str) -> None:
    """Run by the grader in a submission's kernel: the calls of ``plan_path`` (written by the
    grader with :func:`encode`) on the function ``function`` of ``namespace``, described in
    ``out_path``. Stops at the first call that raises (an exception fails the check whatever
    the rest does)."""
    plan = torch.load(plan_path, weights_only=True)
    record: dict = {"function": function}
    fn = namespace.get(function)
    if function not in namespace:
        record["missing"] = f"`{function}` is not defined"
    elif not callable(fn):
        record["missing"] = f"`{function}` is {type(fn).__name__}, not a function"
    else:
        record |= {"name": getattr(fn, "__name__", function), "signature": parameters(fn), "origin": origin(fn),
                   "calls": []}
        for planned in plan["calls"]:
            again = planned.get("again")
            done = call(fn, tuple(decode(a) for a in planned["args"]), tuple(planned.get("grad", ())),
                        None if again is None else tuple(decode(a) for a in again), planned.get("seed"),
                        None if planned.get("on") is None else tuple(decode(a) for a in planned["on"]),
                        planned.get("each", False), planned.get("chain"), planned.get("fills"))
            record["calls"].append({k: v for k, v in done.items() if not k.startswith("_")})
            if "raised" in done:
                break
    # Whole, or no file: a temporary file beside out_path, flushed to disk, then renamed over it (the one way
    # of annotated.support.files.atomic_write, written out here: this code runs in the submission's kernel from
    # its own source, and imports no module of the package, which the notebook could have replaced).
    tmp = f"{out_path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "xb") as out:
            torch.save(record, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, out_path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
