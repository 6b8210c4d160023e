"""Input guards attached to taught classes and functions from outside, so that their cells in a
notebook show the idea alone: ``MultiHeadAttention`` (notebook 04, paper §3.2.2),
``sinusoidal_table``, ``PositionalEncoding`` and ``Embeddings`` (notebook 05, §3.4, §3.5),
``PositionwiseFeedForward`` and ``LayerNorm`` (notebook 06, §3.3, §3.1), ``TransformerConfig`` and
``make_model`` (notebook 07, Table 3).

``check_arguments(cls, check)`` runs ``check`` on the arguments of ``cls(...)`` before the class's
own ``__init__``; ``check_instance(cls, check)`` runs ``check`` on the finished instance (what a
dataclass's ``__post_init__`` would do); ``check_call(cls, check)`` runs ``check`` on the arguments
of every call of ``forward``. Each replaces the method by a wrapper that checks, then calls the
original, so the class computes exactly what its notebook shows, and bad input gets the check's
ValueError, naming the argument, before any work. A subclass that calls ``super().__init__`` is
checked too; one that overrides ``forward`` is not (its own forward decides). A function cannot be
changed in place: ``checked(function, check)`` returns it wrapped, and its module rebinds the name.
"""

import functools
import inspect
from collections.abc import Callable


def _arguments(signature: inspect.Signature, args: tuple, kwargs: dict) -> dict | None:
    """The call's arguments by name, defaults filled in, ``self`` left out; None when the call does
    not fit the signature (then the original method raises its own TypeError)."""
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    arguments.pop("self", None)
    return arguments


def check_arguments(cls: type, check: Callable[..., None]) -> None:
    """Make ``cls(...)`` call ``check(**arguments)`` before ``cls.__init__`` runs."""
    init = cls.__init__
    signature = inspect.signature(init)

    @functools.wraps(init)
    def checked_init(*args, **kwargs):
        arguments = _arguments(signature, args, kwargs)
        if arguments is not None:
            check(**arguments)
        init(*args, **kwargs)

    cls.__init__ = checked_init


def check_instance(cls: type, check: Callable[[object], None]) -> None:
    """Make ``cls(...)`` call ``check(instance)`` once ``cls.__init__`` has run."""
    init = cls.__init__

    @functools.wraps(init)
    def checked_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        check(self)

    cls.__init__ = checked_init


def check_call(cls: type, check: Callable[..., None]) -> None:
    """Make every call of ``cls.forward`` call ``check(module, **arguments)`` first."""
    forward = cls.forward
    signature = inspect.signature(forward)

    @functools.wraps(forward)
    def checked_forward(self, *args, **kwargs):
        arguments = _arguments(signature, (self, *args), kwargs)
        if arguments is not None:
            check(self, **arguments)
        return forward(self, *args, **kwargs)

    cls.forward = checked_forward


def checked(function: Callable, check: Callable[..., None]) -> Callable:
    """``function``, calling ``check(**arguments)`` (every argument by name, defaults filled in)
    before it runs; ``inspect.unwrap`` gives back the plain function."""
    signature = inspect.signature(function)

    @functools.wraps(function)
    def checked_function(*args, **kwargs):
        arguments = _arguments(signature, args, kwargs)
        if arguments is not None:
            check(**arguments)
        return function(*args, **kwargs)

    return checked_function
