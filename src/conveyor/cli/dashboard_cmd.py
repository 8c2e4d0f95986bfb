"""``conveyor dashboard APP``: serve the web dashboard, its JSON API and ``/metrics``.

Credentials come from the environment, never from the command line (where ``ps`` would show
them): ``CONVEYOR_DASHBOARD_TOKEN`` and/or ``CONVEYOR_DASHBOARD_USERNAME`` +
``CONVEYOR_DASHBOARD_PASSWORD``; ``CONVEYOR_DASHBOARD_SECRET`` keeps sessions valid across
restarts. Binding beyond loopback without credentials is refused. Requests whose Host header
is neither the bound address nor an ``--allowed-host`` are refused (DNS rebinding), and
``X-Forwarded-For`` is trusted only from ``--forwarded-allow-ips``.
"""

from __future__ import annotations

import click

from ..errors import ValidationError
from .common import AppCommand, app_option, open_app, say, url_option
from .log_options import log_options


@click.command("dashboard", cls=AppCommand)
@app_option
@url_option
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on; beyond loopback, credentials are required.",
)
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True)
@click.option("--read-only", is_flag=True, help="Show everything, change nothing.")
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="A Host name clients use besides the bound address (repeatable; '*.example.com', "
    "'*' for any). Required when binding 0.0.0.0 or ::.",
)
@click.option(
    "--forwarded-allow-ips",
    default=None,
    metavar="IPS",
    help="Comma-separated proxy addresses/networks whose X-Forwarded-For is trusted "
    "(default: none, the peer address counts).",
)
@log_options
def dashboard_command(
    app_target: str | None,
    url: str | None,
    host: str,
    port: int,
    read_only: bool,
    allowed_hosts: tuple[str, ...],
    forwarded_allow_ips: str | None,
) -> None:
    """Serve the dashboard of APP (module:attribute) on http://HOST:PORT/.

    Without APP, a bare app on --url / CONVEYOR_URL is shown (enqueue by task name still works).

    Authentication: set CONVEYOR_DASHBOARD_TOKEN (scripts send "Authorization: Bearer
    TOKEN") and/or CONVEYOR_DASHBOARD_USERNAME and CONVEYOR_DASHBOARD_PASSWORD (log-in form).
    """
    try:
        from ..dashboard.hardening import check_hosts
        from ..dashboard.security import DashboardConfig, check_bind, split_list
        from ..dashboard.server import serve
    except ImportError as exc:  # pragma: no cover - depends on installed extras
        raise click.ClickException(
            f"the dashboard needs its extra: pip install 'conveyor-jobs[dashboard]' ({exc})"
        ) from exc
    try:
        config = DashboardConfig.from_env(
            read_only=True if read_only else None,
            allowed_hosts=allowed_hosts or None,
            forwarded_allow_ips=split_list(forwarded_allow_ips) if forwarded_allow_ips else None,
        )
        check_bind(host, config)
        check_hosts(host, config)
    except ValidationError as exc:
        raise click.UsageError(str(exc)) from exc
    app = open_app(app_target, url, create=True)
    auth = "on" if config.auth_enabled else "OFF (loopback only)"
    say(
        f"conveyor dashboard http://{host}:{port}/ — auth {auth}"
        f"{', read-only' if config.read_only else ''}"
    )
    serve(app, host=host, port=port, config=config)


def register(group: click.Group) -> None:
    """Add ``dashboard`` to the ``conveyor`` group."""
    group.add_command(dashboard_command)
