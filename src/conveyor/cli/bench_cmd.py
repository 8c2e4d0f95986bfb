"""``conveyor bench``: measure your own setup quickly (the peer comparison is in bench/)."""

from __future__ import annotations

import dataclasses
import logging

import click

from .common import console, emit_json, redacted_url, table


@click.command("bench")
@click.option(
    "--url",
    default=None,
    envvar="CONVEYOR_URL",
    help="Broker URL to measure (default: CONVEYOR_URL or sqlite:///conveyor.db).",
)
@click.option(
    "--jobs",
    default=5000,
    show_default=True,
    type=click.IntRange(100, 1_000_000),
    help="Jobs for the single-enqueue pass (bulk uses twice as many).",
)
@click.option("--concurrency", default=16, show_default=True, type=click.IntRange(1, 1000))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def bench(url: str | None, jobs: int, concurrency: int, as_json: bool) -> None:
    """Measure enqueue, bulk enqueue, drain rate and pickup latency on one broker."""
    from ..bench import run_bench

    logging.getLogger("conveyor").setLevel(logging.ERROR)
    if not as_json:
        shown = redacted_url(url) if url else "the default broker"
        console.print(f"measuring {shown} with {jobs} jobs ...", markup=False)
    result = run_bench(url, jobs=jobs, concurrency=concurrency)
    result = dataclasses.replace(result, url=redacted_url(result.url))  # a title and JSON
    if as_json:
        emit_json(dataclasses.asdict(result))
        return
    table(
        f"Conveyor on {result.url}",
        ["measure", "value"],
        [
            ("enqueue, one call per job", f"{result.enqueue_per_s:,.0f} jobs/s"),
            ("bulk enqueue (enqueue_many of 1,000)", f"{result.bulk_enqueue_per_s:,.0f} jobs/s"),
            (f"drain, one worker, concurrency {concurrency}", f"{result.drain_per_s:,.0f} jobs/s"),
            (
                "pickup latency p50 / p99",
                f"{result.pickup_p50_ms:.1f} / {result.pickup_p99_ms:.1f} ms",
            ),
        ],
    )


def register(group: click.Group) -> None:
    """Add the command to the CLI."""
    group.add_command(bench)
