"""Observability: typed events, metrics stored in the broker, the read API, and alerts.

* ``events``  — the event stream of every job transition, read with a resumable cursor.
* ``metrics`` — per-minute counters and histograms (via ``MetricsMiddleware``), summaries,
  Prometheus exposition.
* ``inspect`` — ``Inspector``: THE read (and operator action) API of the CLI and dashboard.
* ``alerts``  — ``AlertManager`` (``app.alerts``): rules, states, cooldown, notifiers.
"""
