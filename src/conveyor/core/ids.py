"""Job ids: ULIDs (26 Crockford base32 chars, time-sortable), from an injected clock and rng."""

from __future__ import annotations

import random

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
#: Every 10-bit value as two Crockford digits: 80 random bits are 8 lookups.
_PAIRS = tuple(_ALPHABET[i >> 5] + _ALPHABET[i & 31] for i in range(1024))
_last_prefix: tuple[int, str] = (-1, "")


def _encode(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        value, rem = divmod(value, 32)
        chars.append(_ALPHABET[rem])
    return "".join(reversed(chars))


def new_ulid(now: float, rng: random.Random) -> str:
    """Return a ULID for time ``now`` (seconds) using ``rng`` for the 80 random bits."""
    global _last_prefix
    millis = int(now * 1000) & ((1 << 48) - 1)
    prefix = _last_prefix
    if prefix[0] != millis:  # the time part changes at most once per millisecond
        prefix = _last_prefix = (millis, _encode(millis, 10))
    b = rng.getrandbits(80)
    p = _PAIRS
    return (prefix[1] + p[b >> 70] + p[(b >> 60) & 1023] + p[(b >> 50) & 1023]
            + p[(b >> 40) & 1023] + p[(b >> 30) & 1023] + p[(b >> 20) & 1023]
            + p[(b >> 10) & 1023] + p[b & 1023])  # fmt: skip


def ulid_time(ulid: str) -> float:
    """Return the timestamp (seconds) embedded in a ULID."""
    millis = 0
    for ch in ulid[:10]:
        millis = millis * 32 + _ALPHABET.index(ch)
    return millis / 1000.0
