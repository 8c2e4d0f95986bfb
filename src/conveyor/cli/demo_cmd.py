"""``conveyor demo``: run the one-minute tour and print what happened."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from ..demo import DEMO_URL, build_demo_app, run_demo, summarise
from .common import console, emit_json, redacted_url, table


@click.command("demo")
@click.option("--url", default=None, help=f"Broker URL (default: {DEMO_URL}, no server needed).")
@click.option(
    "--jobs",
    "n_jobs",
    default=300,
    show_default=True,
    type=click.IntRange(1, 100_000),
    help="How many jobs to enqueue.",
)
@click.option("--dashboard", is_flag=True, help="Also serve the dashboard and print its URL.")
@click.option(
    "--port",
    default=8000,
    show_default=True,
    type=click.IntRange(1, 65535),
    help="Dashboard port (with --dashboard).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def demo(url: str | None, n_jobs: int, dashboard: bool, port: int, as_json: bool) -> None:
    """Enqueue sample jobs, run a worker and the scheduler, and summarise the outcome."""
    if not logging.getLogger().isEnabledFor(logging.DEBUG):
        # One line per retry would drown the progress bar; the summary reports them instead.
        logging.getLogger("conveyor").setLevel(logging.ERROR)
    app = build_demo_app(url)
    shown_url = redacted_url(url or DEMO_URL)  # never the broker password on a terminal
    if dashboard:
        _serve_dashboard(app, port)
    if not as_json:
        # Text, not markup: a URL may hold "[" (an IPv6 host) that rich would parse.
        console.print(
            Text.assemble(
                ("Conveyor demo", "bold"), " on ", (shown_url, "cyan"), f": {n_jobs} jobs"
            )
        )
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=as_json,
    ) as progress:
        bar = progress.add_task("processing", total=n_jobs)
        run = run_demo(app, n_jobs, lambda done, total: progress.update(bar, completed=done))
    summary = summarise(run)
    if as_json:
        emit_json(dataclasses.asdict(summary))
    else:
        _print_summary(summary, shown_url)
    app.close()
    if summary.unfinished or not summary.completed or not summary.schedule_runs:
        click.echo("error: the demo did not finish every job within its deadline", err=True)
        raise SystemExit(1)


def _print_summary(s: Any, url: str) -> None:
    rows = [
        ("jobs enqueued", s.total),
        ("completed", s.completed),
        ("  of which retried, then completed", s.retried_then_completed),
        ("  of which delayed, then completed", s.delayed_completed),
        ("dead-lettered", s.dead_lettered),
        *((f"  reason: {reason}", count) for reason, count in s.dead_reasons.items()),
        ("unfinished", s.unfinished),
        ("run time p50", f"{s.p50_ms:.1f} ms"),
        ("run time p95", f"{s.p95_ms:.1f} ms"),
        ("schedule runs (every 2 s)", s.schedule_runs),
        ("wall time", f"{s.seconds:.1f} s"),
    ]
    table("Demo summary", ["what", "count"], rows)
    flag = f"--url {url}"
    console.print("\nNext, try:")
    for cmd in (
        f"conveyor status {flag}",
        f"conveyor jobs {flag} --state dead_letter",
        f"conveyor dlq list {flag}",
        f"conveyor dashboard --url {url}",
        "conveyor demo --dashboard",
    ):
        console.print(Text(f"  {cmd}", style="green"))


def _serve_dashboard(app: Any, port: int) -> None:
    from ..dashboard.server import serve_in_thread

    url = serve_in_thread(app, host="127.0.0.1", port=port)
    console.print(f"dashboard: [link={url}]{url}[/link]")


def register(group: click.Group) -> None:
    """Add the command to the CLI."""
    group.add_command(demo)
