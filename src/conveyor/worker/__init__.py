"""Workers: claim jobs through the broker protocol, run them, record outcomes."""

from .loop import Worker

__all__ = ["Worker"]
