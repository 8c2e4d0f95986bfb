"""The job side of a process-pool child: run one job inside its log context and hooks.

The worker sends each job with a small reference (id, task, queue, attempt) that becomes the
child's job context (``worker/logs.py``: the user's log records carry the job id), and, when
the worker's app has ``around_process`` middleware, the job itself and the worker's id: the
child enters the ``around_process`` hooks of the app it imported with the task (the same code,
configured in this process), on the thread that runs the handler.

The replies travel pickled in two layers (``ok_reply`` / ``result_of``, ``error_reply`` /
``exception_of``): a result or exception that cannot be pickled in the child or unpickled in
the worker is that one job's problem (it completes without its result, or fails with a
``RemoteError`` naming the exception), never a message the pool's reader fails on.
"""

from __future__ import annotations

import asyncio
import pickle
import traceback
from typing import Any, NamedTuple

from ..core.job import exception_name
from ..core.retry import describe
from ..errors import RemoteError as RemoteError  # re-exported (it was defined here)
from ..errors import rebuild_exception
from ..middleware import Around
from .execute import Unreceived
from .logs import job_context


class ChildJob(NamedTuple):
    """What the job-context filter reads of the job a child runs."""

    id: str
    task: str
    queue: str
    attempts: int


class ChildWorker:
    """The worker as ``around_process`` hooks see it in a child: its id and its app."""

    def __init__(self, worker_id: str, app: Any) -> None:
        self.id = worker_id
        self.app = app
        self.runtime = getattr(app, "runtime", app)


def run_job(
    fn: Any,
    owner: Any,
    is_async: bool,
    args: Any,
    kwargs: Any,
    ref: tuple[str, str, str, int],
    around: tuple[str, Any] | None,
) -> Any:
    """Call ``fn(*args, **kwargs)`` as the job ``ref`` (``owner``: the ``Task`` it came from,
    whose app's middleware wraps the call when ``around`` = ``(worker_id, job)`` is given)."""
    token = job_context.set(ChildJob(*ref))
    try:
        hooks = _hooks(owner, around[0]) if around is not None else None
        if hooks is not None and around is not None:
            return hooks.call(around[1], lambda: _call(fn, is_async, args, kwargs))
        return _call(fn, is_async, args, kwargs)
    finally:
        job_context.reset(token)


def _hooks(owner: Any, worker_id: str) -> Around | None:
    app = getattr(owner, "app", None)
    middleware = getattr(app, "middleware", None)
    if not middleware:
        return None
    return Around.of(ChildWorker(worker_id, app), middleware)


def _call(fn: Any, is_async: bool, args: Any, kwargs: Any) -> Any:
    if is_async:
        return asyncio.run(fn(*args, **kwargs))
    return fn(*args, **kwargs)


def error_reply(job_id: str, exc: BaseException) -> tuple[Any, ...]:
    """The child's ``("err", ...)`` reply for a job that raised ``exc``."""
    return (
        "err",
        job_id,
        _dump_exc(exc),
        _type_name(exc),
        describe(exc),
        "".join(traceback.format_exception(exc))[-4000:],
        _bases(exc),
    )


def _bases(exc: BaseException) -> tuple[str, ...]:
    """``module.QualName`` of ``exc``'s class and its exception bases (what ``RemoteError``
    classifies by when the worker cannot rebuild ``exc``); () should a hostile class make
    that fail."""
    try:
        return tuple(
            str(exception_name(cls))
            for cls in type(exc).__mro__
            if isinstance(cls, type) and issubclass(cls, BaseException)
        )
    except Exception:
        return ()


def _type_name(exc: BaseException) -> str:
    """``module.QualName`` of ``exc``'s class (what ``RemoteError`` records when the worker
    cannot rebuild it); its bare name should a hostile class make that fail."""
    try:
        return str(exception_name(type(exc)))
    except Exception:
        return type(exc).__name__


def _dump_exc(exc: BaseException) -> bytes | None:
    """``exc`` pickled so that it unpickles: as itself, else rebuilt from its class, ``args``
    and attributes without its ``__init__`` (a custom exception whose ``__init__`` takes other
    arguments than its ``args``: pickle cannot rebuild those, and a ``PermanentError`` among
    them would come back as a retryable ``RemoteError``); None if neither works."""
    for value in (exc, _Rebuilt(exc)):
        try:
            blob = pickle.dumps(value)
            pickle.loads(blob)
            return blob
        except Exception:
            continue
    return None


class _Rebuilt:
    """Pickles an exception as ``errors.rebuild_exception(class, args, attributes)``."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def __reduce__(self) -> tuple[Any, ...]:
        exc = self.exc
        return (rebuild_exception, (type(exc), exc.args, dict(getattr(exc, "__dict__", {}))))


def exception_of(msg: tuple[Any, ...]) -> BaseException:
    """The exception of an ``("err", ...)`` reply: itself, else a ``RemoteError`` naming it."""
    _, _, blob, type_name, message, _tb, *rest = msg
    if blob is not None:
        try:
            exc = pickle.loads(blob)
            if isinstance(exc, BaseException):
                return exc
        except Exception:
            pass
    bases = rest[0] if rest and isinstance(rest[0], tuple) else ()
    return RemoteError(str(type_name), str(message), tuple(str(b) for b in bases))


def ok_reply(job_id: str, result: Any) -> tuple[str, str, bytes | str]:
    """The child's ``("ok", job_id, payload)`` reply: the pickled result, or why it cannot
    be pickled (the job's work is done all the same: it completes without its result)."""
    try:
        return ("ok", job_id, pickle.dumps(result))
    except Exception as exc:
        why = f"{type(exc).__name__}: {describe(exc)}"
        return ("ok", job_id, f"result: cannot be sent from the child process: {why}")


def result_of(payload: bytes | str) -> Any:
    """The result of an ``("ok", ...)`` reply; ``Unreceived`` when the child could not pickle
    it or it cannot be unpickled here (the job is completed without it, like any result that
    cannot be stored)."""
    if isinstance(payload, str):
        return Unreceived(payload)
    try:
        return pickle.loads(payload)
    except Exception as exc:
        why = f"{type(exc).__name__}: {describe(exc)}"
        return Unreceived(f"result: cannot be received from the child process: {why}")
