"""The envelope: typed round trip (property), clear errors, size limit, decoder fuzzing."""

from __future__ import annotations

import contextlib
import datetime as dt
import uuid
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conveyor.core.job import Job
from conveyor.core.serialization import decode_job, decode_value, encode_job, encode_value
from conveyor.errors import DecodeError, PayloadTooLarge, ValidationError

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.text()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.datetimes(timezones=st.just(dt.UTC))
    | st.datetimes()
    | st.dates()
    | st.decimals(allow_nan=False, allow_infinity=False)
    | st.uuids()
    | st.binary()
)
values = st.recursive(
    scalars, lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=20
)


@given(values)
def test_round_trip(value: Any) -> None:
    assert decode_value(encode_value(value, "arg")) == value


@given(st.dictionaries(st.sampled_from(["$dt", "$map", "$b64", "x"]), st.text(), max_size=1))
def test_user_dicts_that_look_tagged_survive(value: dict[str, str]) -> None:
    assert decode_value(encode_value(value, "arg")) == value


def test_job_round_trip() -> None:
    job = Job(
        id="01J",
        task="send",
        args=[dt.date(2024, 1, 1), Decimal("2.50")],
        kwargs={"u": uuid.UUID(int=1)},
        metadata={"b": b"x"},
    )
    assert decode_job(encode_job(job)) == job


@pytest.mark.parametrize("bad", [object(), {1: "int key"}, float("nan"), {1, 2}, 2**64])
def test_unserialisable_values_name_the_argument(bad: Any) -> None:
    with pytest.raises(ValidationError) as info:
        encode_value(["ok", bad], "args")
    assert "args[1]" in str(info.value)


def test_size_limit() -> None:
    job = Job(id="1", task="t", args=["x" * 2000])
    with pytest.raises(PayloadTooLarge):
        encode_job(job, limit=1000)


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"\xff\xfe",
        b"[]",
        b'{"v": 2, "id": "1"}',
        b'{"v": 1, "id": "1"}',
        b'{"v":1,"id":"1","task":"t","queue":"q","state":"nope"}',
    ],
)
def test_bad_envelopes_raise_decode_error(raw: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_job(raw)


@given(st.binary(max_size=300))
def test_decoder_fuzz_raises_only_decode_error(raw: bytes) -> None:
    with contextlib.suppress(DecodeError):
        decode_job(raw)


@given(
    st.dictionaries(
        st.sampled_from(
            [
                "v",
                "id",
                "task",
                "queue",
                "state",
                "args",
                "kwargs",
                "priority",
                "attempts",
                "run_at",
                "errors",
            ]
        ),
        st.none() | st.integers(-(2**63), 2**63 - 1) | st.text() | st.lists(st.integers(0, 10)),
    )
)
def test_decoder_fuzz_structured(data: dict[str, Any]) -> None:
    import orjson

    data.setdefault("v", 1)
    with contextlib.suppress(DecodeError):
        decode_job(orjson.dumps(data))
