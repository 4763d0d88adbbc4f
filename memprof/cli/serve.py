"""`memprof serve`: the dashboard over a runs directory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from memprof.cli.options import DEFAULT_RUNS, RunsDir

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def serve(
    runs: RunsDir = DEFAULT_RUNS,
    scenarios: Annotated[
        Path, typer.Option("--scenarios", help="Folder of scenario files the dashboard may run.")
    ] = Path("scenarios"),
    host: Annotated[
        str, typer.Option(help="Address to listen on. The dashboard has no login: keep it local.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port; 0 picks a free one.")] = 8000,
    open_browser: Annotated[
        bool, typer.Option("--open", help="Open the dashboard in a web browser.")
    ] = False,
    real_devices: Annotated[
        bool,
        typer.Option(
            "--real-devices",
            help="Let scenario runs started from the dashboard use cpu / cuda (default: meta "
            "only, which measures without computing). Each such run is limited to half the "
            "machine's memory.",
        ),
    ] = False,
) -> None:
    """Open a dashboard over the runs directory.

    Pages for runs, timelines, peaks, what is live at the peak and comparisons, a JSON API
    (/openapi.json), and scenario runs from the browser. Ctrl-C stops it.
    """
    import socket
    import threading
    import webbrowser

    import uvicorn

    from memprof.errors import InvalidInput
    from web.app import create_app

    problems = [
        f"{path}: is a file; expected {what} directory ({option} DIR)"
        for path, what, option in (
            (runs, "the runs", "--runs"),
            (scenarios, "a scenarios", "--scenarios"),
        )
        if path.exists() and not path.is_dir()
    ]
    if problems:
        raise InvalidInput("invalid input", problems)
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        raise InvalidInput(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    bound_port = sock.getsockname()[1]
    url_host = f"[{host}]" if ":" in host else host
    url = f"http://{url_host}:{bound_port}/"

    local = host in LOOPBACK
    allowed = [*LOOPBACK, "[::1]"] if local else None
    app = create_app(runs, scenarios, allowed_hosts=allowed, real_devices=real_devices)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    server = uvicorn.Server(config)

    typer.echo(f"memprof dashboard: {url}  (runs: {runs}, scenarios: {scenarios}; Ctrl-C stops)")
    if not local:
        typer.echo(
            f"warning: listening on {host}: anyone who can reach it can read the runs and "
            "start scenario runs",
            err=True,
        )
    if open_browser:
        threading.Timer(0.5, webbrowser.open, args=(url,)).start()
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    typer.echo("memprof dashboard stopped")
