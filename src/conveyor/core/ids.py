"""Job ids: ULIDs (26 Crockford base32 chars, time-sortable), from an injected clock and rng."""

from __future__ import annotations

import os
import random
import weakref
from collections.abc import Iterator

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
#: Every 10-bit value as two Crockford digits: 80 random bits are 8 lookups.
_PAIRS = tuple(_ALPHABET[i >> 5] + _ALPHABET[i & 31] for i in range(1024))
_last_prefix: tuple[int, str] = (-1, "")
#: A random byte -> the Crockford digit of its low 5 bits.
_TO_CROCKFORD = bytes(ord(_ALPHABET[b & 31]) for b in range(256))


class IdRandom(random.SystemRandom):
    """``SystemRandom`` that also serves ULID tails (80 random bits as 16 Crockford digits).

    ``ulid_tail`` draws ``os.urandom`` in blocks and maps each random byte to one digit with
    ``bytes.translate`` (its low 5 bits: uniform, since 256 is a multiple of 32), all in C: one
    ``getrandom(2)`` call per 256 ids and a fraction of a microsecond per id instead of a
    syscall and ~2 µs of Python per id. Same entropy source. Each tail is handed out once: a
    list iterator's ``next`` is atomic under the GIL, and a thread that finds it exhausted
    builds its own fresh block. A
    forked child drops the parent's pending tails (``os.register_at_fork``), so parent and child
    never produce the same ids. Every other draw is plain ``SystemRandom``.
    """

    _BLOCK = 256  # tails per os.urandom call

    def __init__(self) -> None:
        super().__init__()
        self._tails: Iterator[str] = iter(())
        _LIVE.add(self)

    def ulid_tail(self) -> str:
        """16 Crockford base32 digits of 80 fresh random bits."""
        tail = next(self._tails, None)
        if tail is None:
            text = os.urandom(16 * self._BLOCK).translate(_TO_CROCKFORD).decode("ascii")
            block = [text[i : i + 16] for i in range(0, len(text), 16)]
            tail = block.pop()
            self._tails = iter(block)
        return tail


_LIVE: weakref.WeakSet[IdRandom] = weakref.WeakSet()


def _after_fork() -> None:
    for rng in list(_LIVE):
        rng._tails = iter(())


os.register_at_fork(after_in_child=_after_fork)


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
    if type(rng) is IdRandom:
        return prefix[1] + rng.ulid_tail()
    b = rng.getrandbits(80)
    p = _PAIRS
    return (
        prefix[1]
        + p[b >> 70]
        + p[(b >> 60) & 1023]
        + p[(b >> 50) & 1023]
        + p[(b >> 40) & 1023]
        + p[(b >> 30) & 1023]
        + p[(b >> 20) & 1023]
        + p[(b >> 10) & 1023]
        + p[b & 1023]
    )


def ulid_time(ulid: str) -> float:
    """Return the timestamp (seconds) embedded in a ULID."""
    millis = 0
    for ch in ulid[:10]:
        millis = millis * 32 + _ALPHABET.index(ch)
    return millis / 1000.0
