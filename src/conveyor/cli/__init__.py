"""The ``conveyor`` command line (click + rich)."""
