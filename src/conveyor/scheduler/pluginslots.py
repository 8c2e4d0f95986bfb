"""The scheduler's bookkeeping of each plugin: when it is due, and its run of failures.

A plugin that raises is retried sooner than its period, backing off (``outage.retry_delay``,
at most its ``retry_cap``); a broker outage is logged once (``OutageLog``), any other error
with its traceback once per run of failures (again if the error changes), then one line every
``REMIND_EVERY`` seconds, and one line when it works again. What ``tick`` returns must be None
or a time: anything else is logged once and read as None (the plugin runs on every pass).
"""

from __future__ import annotations

import logging
import math
import random
from dataclasses import dataclass

from ..outage import REMIND_EVERY, OutageLog, retry_delay
from .plugins import Plugin

log = logging.getLogger("conveyor.scheduler")


@dataclass
class Slot:
    """A plugin, when it is due (None: on the next pass) and its run of failures."""

    plugin: Plugin
    due: float | None = None
    failures: int = 0  # ticks that raised in a row
    error: str = ""  # the last one's text (a different error logs its traceback again)
    logged_at: float = 0.0  # when a line about this run of failures was last written
    bad_due: bool = False  # its tick returned something else than None or a time (logged)


def next_due(slot: Slot, due: object) -> float | None:
    """A plugin's answer to ``tick``: None or finite epoch seconds. Anything else (a string
    made every later pass raise before any plugin ran; NaN made the loop spin) is logged
    once and read as None: the plugin runs again on the next pass."""
    if due is None:
        return None
    if not isinstance(due, bool) and isinstance(due, int | float) and math.isfinite(due):
        return float(due)
    if not slot.bad_due:
        slot.bad_due = True
        log.error(
            "scheduler plugin %r: tick() returned %s, not None or a time; running it on every pass",
            slot.plugin.name,
            one_line(repr(due))[:80],
        )
    return None


def plugin_failed(
    slot: Slot, exc: Exception, at: float, outage: OutageLog, rng: random.Random
) -> None:
    """``slot``'s tick raised ``exc`` at ``at``: due again after ``retry_delay``; logged as
    the module docstring says."""
    slot.failures += 1
    plugin = slot.plugin
    delay = retry_delay(slot.failures, float(plugin.retry_cap), rng)
    slot.due = at + delay
    if outage.failed(exc, f"scheduler plugin {plugin.name}", log):
        return
    what = one_line(f"{type(exc).__name__}: {exc}")
    if slot.failures == 1 or what != slot.error:
        slot.error, slot.logged_at = what, at
        log.error(
            "scheduler plugin %r failed; retrying in %.2gs, backing off",
            plugin.name,
            delay,
            exc_info=exc,
        )
    elif at - slot.logged_at >= REMIND_EVERY:
        slot.logged_at = at
        log.error(
            "scheduler plugin %r still failing after %d tries: %s",
            plugin.name,
            slot.failures,
            what,
        )


def plugin_recovered(slot: Slot) -> None:
    """A tick worked after failures: say so (an outage's end is ``OutageLog``'s line)."""
    if slot.error:
        log.info(
            "scheduler plugin %r works again after %d failure(s)",
            slot.plugin.name,
            slot.failures,
        )
    slot.failures, slot.error = 0, ""


def one_line(text: str) -> str:
    """An error message for a log line: control characters escaped, at most 300 characters
    (a stored document or a hook's exception may hold anything)."""
    return repr(text)[1:-1][:300]
