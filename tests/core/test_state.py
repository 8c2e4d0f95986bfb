"""The transition table: every (state, event) pair is either allowed with one target or refused."""

from __future__ import annotations

import itertools

import pytest

from conveyor.core.state import TERMINAL_STATES, TRANSITIONS, Event, JobState, allowed, transition
from conveyor.errors import IllegalTransition

S, E = JobState, Event
EXPECTED = {
    (S.SCHEDULED, E.PROMOTE): S.PENDING,
    (S.RETRY_SCHEDULED, E.PROMOTE): S.PENDING,
    (S.PENDING, E.CLAIM): S.ACTIVE,
    (S.ACTIVE, E.COMPLETE): S.COMPLETED,
    (S.ACTIVE, E.FAIL_RETRY): S.RETRY_SCHEDULED,
    (S.ACTIVE, E.BURY): S.DEAD_LETTER,
    (S.ACTIVE, E.RELEASE): S.PENDING,
    (S.ACTIVE, E.RELEASE_DELAYED): S.SCHEDULED,
    (S.ACTIVE, E.EXPIRE): S.PENDING,
    (S.ACTIVE, E.EXPIRE_POISON): S.DEAD_LETTER,
    (S.SCHEDULED, E.CANCEL): S.CANCELLED,
    (S.PENDING, E.CANCEL): S.CANCELLED,
    (S.RETRY_SCHEDULED, E.CANCEL): S.CANCELLED,
    (S.DEAD_LETTER, E.REQUEUE): S.PENDING,
    (S.CANCELLED, E.REQUEUE): S.PENDING,
    # issue 16: a running job cancelled by an operator, recorded by the lease holder (fenced)
    (S.ACTIVE, E.CANCEL_RUNNING): S.CANCELLED,
    # workflows: a node waits for its parents, then runs or ends with the failed parent named
    (S.WAITING, E.RELEASE_PARENTS): S.PENDING,
    (S.WAITING, E.RELEASE_PARENTS_LATER): S.SCHEDULED,  # the node's own delay (session 5)
    (S.WAITING, E.UPSTREAM_FAILED): S.CANCELLED,
    (S.WAITING, E.CANCEL): S.CANCELLED,
    (S.PENDING, E.LAPSE): S.EXPIRED,
    (S.EXPIRED, E.REQUEUE): S.PENDING,
}


@pytest.mark.parametrize(("state", "event"), list(itertools.product(JobState, Event)))
def test_every_state_event_pair(state: JobState, event: Event) -> None:
    if (state, event) in EXPECTED:
        assert transition(state, event) is EXPECTED[(state, event)]
        assert allowed(state, event)
    else:
        with pytest.raises(IllegalTransition):
            transition(state, event)
        assert not allowed(state, event)


def test_table_is_exactly_the_documented_one() -> None:
    assert TRANSITIONS == EXPECTED


def test_terminal_states_only_leave_by_requeue() -> None:
    for (state, event), _ in TRANSITIONS.items():
        if state in TERMINAL_STATES:
            assert event is Event.REQUEUE
    terminal = {"completed", "dead_letter", "cancelled", "expired"}
    assert {s.value for s in TERMINAL_STATES} == terminal


def test_unknown_names_are_illegal() -> None:
    with pytest.raises(IllegalTransition):
        transition("nope", "claim")
    assert not allowed("pending", "explode")


def test_waiting_is_not_terminal_and_only_parents_or_cancel_end_it() -> None:
    assert S.WAITING not in TERMINAL_STATES
    assert {e for (s, e) in TRANSITIONS if s is S.WAITING} == {
        E.RELEASE_PARENTS,
        E.RELEASE_PARENTS_LATER,
        E.UPSTREAM_FAILED,
        E.CANCEL,
    }
