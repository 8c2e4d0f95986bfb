"""The worker control channel: an operator asks one worker process to go QUIET or to STOP.

A command is a small document in the side stores (``broker.docs``, collection
``worker_control``, named by the worker id), so it works on every backend and needs no
connection to the worker. The worker's heartbeat reads it on every beat (``Heartbeat``), so a
command is honoured within one ``heartbeat_interval``:

* ``quiet`` — stop claiming new jobs; running jobs finish; the worker stays up (state "quiet");
* ``stop`` — a graceful shutdown, as on SIGTERM: no new claims, running jobs get
  ``shutdown_timeout``, then the process exits.

``stop`` is the stronger command: a later ``quiet`` does not replace it. The document expires
after ``CONTROL_TTL`` (a command for a worker that died is not kept forever) and a worker that
exits deletes its own.

A command may also name a *group*: the processes one ``conveyor worker --processes N`` started
(``group_key``; the supervisor hands its children the group name, ``procutil.GROUP_ENV``).
Each child reads its own flag and its group's, and obeys the stronger (``strongest``), so a
child the supervisor restarts after the command still gets it. A group's document is left to
expire: the group name includes the supervisor's pid and start time, so it is never reused.
"""

from __future__ import annotations

from typing import Any

from ..broker.side import SideStores
from ..errors import ValidationError

COLLECTION = "worker_control"
QUIET, STOP = "quiet", "stop"
COMMANDS = (QUIET, STOP)
CONTROL_TTL = 24 * 3600.0


def send(side: SideStores, worker_id: str, command: str, now: float, by: str = "") -> str:
    """Store ``command`` for ``worker_id``; returns the command now in force."""
    if command not in COMMANDS:
        raise ValidationError("command", f"must be one of {', '.join(COMMANDS)}")
    if not isinstance(worker_id, str) or not worker_id or len(worker_id) > 1000:
        raise ValidationError("worker", "must be a worker id (1..1000 characters)")
    if command == QUIET and read(side, worker_id, now) == STOP:
        return STOP  # never weaken a pending stop
    doc: dict[str, Any] = {"command": command, "at": now, "by": by}
    side.docs.put(COLLECTION, worker_id, doc, now, ttl=CONTROL_TTL)
    return command


def read(side: SideStores, worker_id: str, now: float) -> str | None:
    """The command in force for ``worker_id``, or None."""
    doc = side.docs.get(COLLECTION, worker_id, now)
    command = doc.get("command") if doc else None
    return command if command in COMMANDS else None


#: The control documents of groups are named ``group=<name>``: no worker id may start with it
#: (``options.worker_identifier``), so a worker's flag and a group's never share a name.
GROUP_PREFIX = "group="


def group_key(group: str) -> str:
    """The control document name of a worker group (generated worker ids hold no ``=``)."""
    return GROUP_PREFIX + group


def strongest(*commands: str | None) -> str | None:
    """The command in force when several apply: ``stop`` over ``quiet`` over none."""
    if STOP in commands:
        return STOP
    return QUIET if QUIET in commands else None


def clear(side: SideStores, worker_id: str) -> None:
    """Forget the command for ``worker_id`` (the worker exited)."""
    side.docs.delete(COLLECTION, worker_id)
