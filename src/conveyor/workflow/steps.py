"""How a ``task.s(...)`` step meets its parents: does it take the upstream result first?

The issue's spelling is ``chain(fetch.s(url), parse.s(), store.s())``: a ``.s()`` placed after
another step gets the upstream result as its first argument. ``task.s`` checked its arguments
with that first slot optional; here, when the workflow is built and the position is known,
they are checked exactly:

* after another step: the function must take ``(result, *args, **kwargs)``. A spec whose own
  arguments are complete but leave no room for the result (``ping.s()`` for ``def ping()``,
  ``add.s(1, 2)``) is what session 4 documented as an immutable ``.s()``: it still runs
  without the result, with a ``FutureWarning`` naming the task (write ``task.si(...)``);
* with nothing before it (a chain's first step, a batch callback, ``results=False``): its own
  arguments must be complete, else a ``ValidationError`` names the task and the parameter that
  would have come from upstream.

A spec of a task this app has not registered (``JobSpec`` by name) cannot be checked: it keeps
its own arguments only, as before.
"""

from __future__ import annotations

import inspect
import warnings
from typing import TYPE_CHECKING, Any

from ..broker.flow import PassMode
from ..errors import ValidationError
from ..task import JobSpec

if TYPE_CHECKING:
    from .host import FlowHost

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def spec_mode(runtime: FlowHost, spec: JobSpec, passing: PassMode) -> PassMode:
    """How the node of ``spec`` receives its parents' results (``passing``: what the position
    offers, "none" when nothing comes before it); raises when the arguments cannot fit."""
    task = spec.origin
    if task is None:
        task = getattr(runtime, "tasks", {}).get(spec.task)
    binder = getattr(task, "binder", None)
    if binder is None:
        return "none"  # not registered here: the worker that runs it judges its arguments
    if passing != "none":
        if binder.reason((None, *spec.args), spec.kwargs) is None:
            return passing
        _warn_immutable(spec, binder)
        return "none"
    if binder.reason(spec.args, spec.kwargs) is not None:
        param = _first_param(binder.signature)
        raise ValidationError(
            param,
            f"{_call(spec)} leaves its first argument {param!r} to the step before it, but "
            "nothing comes before it here (a first step, a batch callback or results=False):"
            f" pass {param!r} in .s(...)",
        )
    return "none"


def _warn_immutable(spec: JobSpec, binder: Any) -> None:
    """The session-4 immutable ``.s()``: still runs without the result, but say so."""
    shown = f"{spec.task}{binder.signature.replace(return_annotation=inspect.Parameter.empty)}"
    warnings.warn(
        f"{_call(spec)} comes after another step, whose result would be its first argument, "
        f"but {shown} cannot take it with these arguments; it runs without the result. Write "
        f"{spec.task}.si(...) for a step that takes no result (in a later version this "
        "will be an error)",
        FutureWarning,
        stacklevel=2,
    )


def _first_param(sig: inspect.Signature | None) -> str:
    """The name of the first positional parameter (the upstream result's slot)."""
    if sig is not None:
        for name, param in sig.parameters.items():
            if param.kind in _POSITIONAL:
                return name
    return "args"


def _call(spec: JobSpec) -> str:
    """``parse.s()`` / ``add.s(1, 2)`` for messages (values cut short: they may be large)."""
    parts = [repr(a)[:40] for a in spec.args]
    parts += [f"{k}={v!r}"[:40] for k, v in spec.kwargs.items()]
    return f"{spec.task}.s({', '.join(parts)})"
