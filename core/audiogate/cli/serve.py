"""``audiogate serve``: the reference HTTP server, on uvicorn or Ray Serve (docs/server.md)."""

from __future__ import annotations

import argparse
from typing import Any, Final, TextIO

from audiogate.argtypes import positive_int
from audiogate.cli.common import UsageError
from audiogate.host import FamilyHost

__all__ = ["SERVE_EPILOG", "add_parser", "run"]

SERVE_EPILOG: Final = """\
endpoints:
  POST /v1/audio/prepare   chat messages with audio in; token ids and features out
  /v1/audio/sources        with --store DIR: upload (POST), list, show, retire (DELETE)
  GET  /metrics            Prometheus metrics
  GET  /healthz            200 while the worker runs, 503 once it is closed

request body (JSON): OpenAI-style chat messages with audio parts
  {"model": "optional name",
   "messages": [{"role": "user", "content": [
       {"type": "input_audio", "input_audio": {"data": "<base64 WAV>", "format": "wav"}},
       {"type": "audio_url", "audio_url": {"url": "data:audio/wav;base64,..."}},
       {"type": "text", "text": "What is said?"}]}],
   "audiogate": {"feature_format": "npy", "return_features": true}}
  audio_url also takes file:// URLs (under --media-path) and http(s):// (--allow-url-fetch).

answer: {"object": "audiogate.prepared", "family", "input_ids", "prefill_positions",
  "text", "audio_spans", "clips", "totals", "features"}; an error is
  {"error": {"type", "reason", "message", "clip_index", ...}} with a 4xx/5xx status.
  See docs/server.md.
"""


def add_parser(sub: Any, *, arguments: bool) -> None:
    """Add ``serve`` to the subcommands ``sub`` (its arguments only when ``arguments``)."""
    p = sub.add_parser(
        "serve",
        help="serve POST /v1/audio/prepare, /metrics and /healthz (Starlette on uvicorn)",
        description="Serve the checkpoint's audio preparation over HTTP.",
        epilog=SERVE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if arguments:
        # Its defaults come from the server's and the worker's limits, whose modules import
        # prometheus_client and the acquisition (httpx): only for ``serve`` itself.
        from audiogate.server.options import add_serve_arguments

        add_serve_arguments(p)
        ray = p.add_argument_group("Ray Serve (--engine ray; docs/ray.md)")
        ray.add_argument(
            "--engine",
            choices=["uvicorn", "ray"],
            default="uvicorn",
            help="uvicorn: one process (default); ray: replicas on Ray Serve (audiogate[ray])",
        )
        ray.add_argument(
            "--num-replicas", type=positive_int, metavar="N", help="fixed replicas (default 1)"
        )
        ray.add_argument("--min-replicas", type=int, metavar="N", help="autoscale from N replicas")
        ray.add_argument(
            "--max-replicas", type=positive_int, metavar="N", help="autoscale up to N replicas"
        )
        ray.add_argument(
            "--ray-address",
            metavar="ADDRESS",
            help="an existing Ray cluster (default: a local one started by ray.init())",
        )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace, host: FamilyHost, out: TextIO) -> int:
    """Serve until SIGINT or SIGTERM; the exit code of the server."""
    from audiogate.server.options import serve_options

    ray_only = [
        flag
        for flag, value in (
            ("--num-replicas", args.num_replicas),
            ("--min-replicas", args.min_replicas),
            ("--max-replicas", args.max_replicas),
            ("--ray-address", args.ray_address),
        )
        if value is not None
    ]
    if args.engine != "ray":
        if ray_only:
            raise UsageError(f"audiogate serve: {ray_only[0]} goes with --engine ray")
        from audiogate.server.run import serve

        return serve(serve_options(args), host=host)
    autoscaling = None
    if args.min_replicas is not None or args.max_replicas is not None:
        if args.num_replicas is not None:
            raise UsageError(
                "audiogate serve: give --num-replicas or --min/--max-replicas, not both"
            )
        low = args.min_replicas if args.min_replicas is not None else 1
        autoscaling = {"min_replicas": low, "max_replicas": args.max_replicas or max(low, 1)}
    from audiogate.integrations.ray_serve import serve_on_ray

    return serve_on_ray(
        serve_options(args),
        num_replicas=args.num_replicas,
        autoscaling_config=autoscaling,
        address=args.ray_address,
    )


# --- parser --------------------------------------------------------------------------
