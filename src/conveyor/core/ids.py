"""Job ids: ULIDs (26 Crockford base32 chars, time-sortable), from an injected clock and rng."""

from __future__ import annotations

import random

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def _encode(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        value, rem = divmod(value, 32)
        chars.append(_ALPHABET[rem])
    return "".join(reversed(chars))


def new_ulid(now: float, rng: random.Random) -> str:
    """Return a ULID for time ``now`` (seconds) using ``rng`` for the 80 random bits."""
    millis = int(now * 1000) & ((1 << 48) - 1)
    return _encode(millis, 10) + _encode(rng.getrandbits(80), 16)


def ulid_time(ulid: str) -> float:
    """Return the timestamp (seconds) embedded in a ULID."""
    millis = 0
    for ch in ulid[:10]:
        millis = millis * 32 + _ALPHABET.index(ch)
    return millis / 1000.0
