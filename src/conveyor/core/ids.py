"""Job ids: ULIDs (26 Crockford base32 chars, time-sortable), from an injected clock and rng."""

from __future__ import annotations

import base64
import random

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# base64.b32encode speaks the RFC 4648 alphabet; translate it to Crockford's in one C call.
_RFC_TO_CROCKFORD = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", _ALPHABET)
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
    if _last_prefix[0] != millis:  # the time part changes at most once per millisecond
        _last_prefix = (millis, _encode(millis, 10))
    raw = rng.getrandbits(80).to_bytes(10, "big")
    return _last_prefix[1] + base64.b32encode(raw).decode("ascii").translate(_RFC_TO_CROCKFORD)


def ulid_time(ulid: str) -> float:
    """Return the timestamp (seconds) embedded in a ULID."""
    millis = 0
    for ch in ulid[:10]:
        millis = millis * 32 + _ALPHABET.index(ch)
    return millis / 1000.0
