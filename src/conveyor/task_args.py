"""Binding a call's arguments against a task function's signature, cheaply, at enqueue.

``ArgBinder`` answers "do these arguments fit?" for every enqueue of a registered task (issue
19: a missing or unexpected argument is refused at enqueue with a ``ValidationError`` naming
it, instead of dead-lettering on the worker). Enqueue is a hot path, so:

* the ``inspect.Signature`` is computed once per task;
* a call with only positional arguments whose count lies in the accepted range (the common
  ``task.enqueue(a, b)``) is accepted with two integer comparisons;
* any other shape (keywords) is bound once with ``Signature.bind`` and the verdict cached by
  shape — the count of positional arguments and the keyword names, never the values — so a
  shape costs one dict lookup after its first use (``Task.check_arguments`` on the worker
  shares the cache).

The detailed error (which argument, "did you mean") is computed only when a call is refused.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from .core.cache import BoundedCache
from .errors import ValidationError

#: Distinct argument shapes remembered per task.
SHAPE_CACHE_MAX = 256
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


class ArgBinder:
    """Checks calls of one function; see the module docstring."""

    __slots__ = ("max_pos", "min_pos", "name", "shapes", "signature")

    def __init__(self, name: str, fn: Any) -> None:
        self.name = name
        try:
            self.signature: inspect.Signature | None = inspect.signature(fn)
        except (TypeError, ValueError):  # builtins without a signature: accept anything
            self.signature = None
        self.shapes: BoundedCache[tuple[int, tuple[str, ...]], str | None] = BoundedCache(
            SHAPE_CACHE_MAX
        )
        self.min_pos, self.max_pos = _positional_range(self.signature)

    def reason(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
        """None if the call fits the signature, else ``Signature.bind``'s reason (cached)."""
        if self.signature is None:
            return None
        if not kwargs and self.min_pos <= len(args) <= self.max_pos:
            return None  # the fast path: positional arguments only, an accepted count
        shape = (len(args), tuple(kwargs))
        try:
            return self.shapes[shape]
        except KeyError:
            pass
        try:
            self.signature.bind(*args, **kwargs)
            reason: str | None = None
        except TypeError as exc:
            reason = str(exc)
        return self.shapes.put(shape, reason)

    def require(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        """Raise ``ValidationError`` naming the argument if the call does not fit."""
        if self.signature is None:
            return
        if not kwargs and self.min_pos <= len(args) <= self.max_pos:
            return
        if self.reason(args, kwargs) is not None:
            raise self.error(args, kwargs)

    def error(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> ValidationError:
        """The ``ValidationError`` for a call that does not fit (the slow path)."""
        sig = self.signature
        assert sig is not None
        shown = f"{self.name}{_bare(sig)}"
        params = sig.parameters
        accepts_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        for key in kwargs:
            param = params.get(key)
            if param is None and not accepts_kw:
                names = [
                    n for n, p in params.items() if p.kind is not inspect.Parameter.POSITIONAL_ONLY
                ]
                close = difflib.get_close_matches(key, names, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                return ValidationError(key, f"unexpected keyword argument for {shown}{hint}")
            if param is not None and param.kind is inspect.Parameter.POSITIONAL_ONLY:
                return ValidationError(key, f"is positional-only in {shown}")
        if len(args) > self.max_pos:
            return ValidationError(
                "args",
                f"{shown} takes at most {self.max_pos} positional argument(s), got {len(args)}",
            )
        try:
            bound = sig.bind_partial(*args, **kwargs)
        except TypeError as exc:  # e.g. a value given both by position and by keyword
            return ValidationError(_quoted(str(exc)) or "args", f"{exc} in {shown}")
        for name, param in params.items():
            if name not in bound.arguments and _required(param):
                return ValidationError(name, f"missing required argument of {shown}")
        return ValidationError("args", f"arguments do not fit {shown}")


def _bare(sig: inspect.Signature) -> inspect.Signature:
    """The signature without annotations (``send_email(to, subject, *, cc=None)``)."""
    empty = inspect.Parameter.empty
    params = [p.replace(annotation=empty) for p in sig.parameters.values()]
    return sig.replace(parameters=params, return_annotation=empty)


def _required(param: inspect.Parameter) -> bool:
    return param.default is inspect.Parameter.empty and param.kind not in (
        inspect.Parameter.VAR_POSITIONAL,
        inspect.Parameter.VAR_KEYWORD,
    )


def _positional_range(sig: inspect.Signature | None) -> tuple[int, float]:
    """(fewest, most) positional arguments a keyword-free call may pass; (1, 0) — an empty
    range, so every call takes the cached path — when a keyword-only argument is required."""
    if sig is None:
        return 0, float("inf")
    params = list(sig.parameters.values())
    if any(p.kind is inspect.Parameter.KEYWORD_ONLY and _required(p) for p in params):
        return 1, 0
    positional = [p for p in params if p.kind in _POSITIONAL]
    most: float = len(positional)
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        most = float("inf")
    return sum(1 for p in positional if _required(p)), most


def _quoted(text: str) -> str | None:
    """The first 'quoted' name of a ``TypeError`` message."""
    start = text.find("'")
    end = text.find("'", start + 1)
    return text[start + 1 : end] if 0 <= start < end else None


def unknown_task_error(name: str, known: Sequence[str]) -> ValidationError:
    """``ValidationError`` for an enqueue by a name the app has not registered."""
    close = difflib.get_close_matches(name, list(known), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return ValidationError(
        "task",
        f"no task named {name!r} is registered in this app{hint}; a producer that enqueues "
        "tasks of another service by name uses Conveyor(..., strict_names=False)",
    )
