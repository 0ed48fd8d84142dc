"""The ``runaway-sidecar`` command line.

Subcommands:

- ``serve``: the proxy, in front of one upstream.
- ``simulate``: a simulated vLLM node, for the demo, tests and benchmarks.
- ``replay``: replay reasoning traces through the default detector chain.
- ``traces label``: label recorded traces loop, healthy or ambiguous, in a terminal.
- ``calibrate``: calibrate the detectors on labelled traces, per model.
- ``demo``: the simulator and the sidecar in one process, with a runaway request.

Exit codes: 0 on success, 2 for a bad command line or config (one line on stderr that
names the key), 1 for anything else.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import signal
import sys
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from sidecar import __version__
from sidecar.config import (
    Config,
    load_config,
    option_keys,
    parse_host_port,
)
from sidecar.errors import ConfigError

PROG = "runaway-sidecar"

_SERVE_HELP = """\
Run the proxy on a vLLM node's port, in front of vLLM (moved to another port).

Every option below can also be set in the TOML file given by --config, or by an
environment variable RUNAWAY_SIDECAR_<NAME> (RUNAWAY_SIDECAR_DETECTORS_<NAME> for the
detector table). Precedence: flag > environment > file > default. See
deploy/examples/gpu0.toml for every key with its default (docs/request-life.md,
"Configuration").

Under systemd socket activation (LISTEN_PID, LISTEN_FDS, LISTEN_FDNAMES) it serves the
passed socket instead of binding --listen (and a second one named "metrics" instead of
--metrics-listen); with --workers every worker serves that socket. When the unit sets
WatchdogSec, the event loop sends WATCHDOG=1 every half of it (deploy/README.md).

SIGHUP reloads the config; so does a change of the --config file, checked every
config_watch_seconds (default 5; 0: never), which is how a Kubernetes ConfigMap update
reaches it.
"""


def _flag_name(key: str) -> str:
    return "--" + key.replace("_", "-")


def _add_option_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per config option, generated from the config schema."""
    explicit = {
        "upstream": "upstream base URL, e.g. http://127.0.0.1:8001",
        "listen": "host:port clients connect to (default 127.0.0.1:8000)",
        "metrics_listen": "host:port for /metrics, /healthz, /readyz (default 127.0.0.1:9464)",
        "mode": "enforce (cut and reissue, default), cut, shadow (detect only) or off",
        "log_format": "json (default, for journald) or console",
        "workers": "processes sharing the listen port (SO_REUSEPORT, or the socket passed by "
                   "systemd socket activation)",
        "upstream_keepalive_seconds": "seconds an idle upstream connection is kept for the "
                                      "next request, then closed (default 4: below the 5 s "
                                      "after which vLLM's uvicorn closes it; 0: none kept)",
    }
    group = parser.add_argument_group("options (also settable in the config file)")
    for key, tp in option_keys():
        help_text = explicit.get(key, f"config key {key} ({_type_name(tp)})")
        group.add_argument(_flag_name(key), dest=f"opt:{key}", metavar="VALUE", help=help_text)


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return "|".join(str(a) for a in typing.get_args(tp))
    if origin is tuple:
        return "comma-separated list"
    return str(tp).replace("typing.", "").replace("<class '", "").replace("'>", "")


class _Version(argparse.Action):
    """``--version``: the version, and whether the per-event path runs compiled (mypyc) or
    as pure Python, and why (``detectors.native``); asked only when given."""

    def __init__(self, option_strings: list[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        from detectors.native import describe

        # On stdout, as argparse's own version action prints it (``parser.exit`` would
        # write to stderr).
        print(f"{PROG} {__version__}, {describe()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for the docs test)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="A streaming proxy that cuts runaway reasoning in front of vLLM and "
        "splices a thinking-off answer into the same response.",
    )
    parser.add_argument("--version", action=_Version,
                        help="show the version and which build runs: compiled or pure Python")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    serve = sub.add_parser("serve", help="run the proxy", description=_SERVE_HELP,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    serve.add_argument("--config", type=Path, metavar="FILE", help="TOML config file")
    _add_option_flags(serve)

    sim = sub.add_parser("simulate", help="run a simulated vLLM node",
                         description="Serve a simulated vLLM 0.32 node whose models "
                         "(sim-healthy, sim-loop, sim-paraphrase-loop, sim-long-thinking, "
                         "sim-cjk-loop, sim-leaky, sim-stall, sim-replay) script the "
                         "runaway cases. Byte-true to vLLM's wire format.")
    sim.add_argument("--listen", default="127.0.0.1:8001", metavar="HOST:PORT")
    sim.add_argument("--tokens-per-second", type=float, default=65.0, metavar="N",
                     help="per-stream token rate (default 65, like the field report; 0 = "
                     "as fast as possible)")
    sim.add_argument("--dialect", default="vllm",
                     choices=("vllm", "llamacpp", "sglang", "ollama"),
                     help="which server to imitate, with the same sim-* models (default vllm; "
                     "ollama also serves the native /api/chat and /api/generate)")
    sim.add_argument("--replay", type=Path, metavar="FILE",
                     help="JSONL traces (with 'text') streamed by the sim-replay model")

    replay = sub.add_parser("replay", help="replay traces through the detectors",
                            description="Replay reasoning traces through the default detector "
                            "chain exactly as the proxy feeds them, and score the verdicts.")
    replay.add_argument("traces", type=Path, metavar="TRACES.jsonl",
                        help="one JSON object per line with 'text' (or 'reasoning'/'content'), "
                        "optional 'id' and 'label'")
    replay.add_argument("--config", type=Path, metavar="FILE",
                        help="TOML config whose [detectors] table is used")
    replay.add_argument("--json", action="store_true", help="print machine-readable JSON")

    traces = sub.add_parser("traces", help="recorded traces ([record] dir)",
                            description="Work on the traces recorded in a directory.")
    traces_sub = traces.add_subparsers(dest="traces_command", metavar="ACTION", required=True)
    label = traces_sub.add_parser(
        "label", help="mark each trace loop, healthy or ambiguous",
        description="Show each unlabelled trace's tail and verdict and read one command a "
        "line: l (loop, then where it starts), h (healthy), a (ambiguous), s (skip), "
        "u (undo), m (more of the tail), f (the text where it fired), ? (help), q (quit). "
        "Labels are appended to DIR/labels.jsonl; the trace files are not changed.")
    label.add_argument("dir", type=Path, metavar="DIR")
    label.add_argument("--tail", type=int, default=1200, metavar="N",
                       help="characters of reasoning shown (default 1200)")
    label.add_argument("--all", action="store_true", help="also traces already labelled")

    cal = sub.add_parser("calibrate", help="calibrate the detectors on labelled traces",
                         description="Replay the labelled traces of DIR through the detector "
                         "chain and report per model: loops caught, false alarms, detection "
                         "delay and each threshold's margin over the healthy maxima; propose "
                         "a [[models]] entry that keeps MARGIN over them and fires on no "
                         "labelled healthy trace.")
    cal.add_argument("dir", type=Path, metavar="DIR")
    cal.add_argument("--config", type=Path, metavar="FILE",
                     help="TOML config whose [detectors] and [[models]] are in force")
    cal.add_argument("--json", action="store_true", help="print machine-readable JSON")
    cal.add_argument("--html", type=Path, metavar="FILE",
                     help="also write a self-contained page with every trace's scores")
    cal.add_argument("--margin", type=float, default=1.5,
                     help="thresholds are set this many times over the healthy maxima "
                     "(default 1.5)")
    cal.add_argument("--min-healthy", type=int, default=30, metavar="N",
                     help="healthy traces a model needs before a threshold is lowered or a "
                     "budget set (default 30)")
    cal.add_argument("--html-limit", type=int, default=400, metavar="N",
                     help="charts on the page at most (default 400)")

    demo = sub.add_parser("demo", help="show a runaway being cut and answered",
                          description="Start the simulator and the sidecar in one process, "
                          "send a runaway request through an official SDK (openai for chat "
                          "and responses, anthropic for messages), and print what happened.")
    demo.add_argument("--tokens-per-second", type=float, default=65.0, metavar="N")
    demo.add_argument("--max-tokens", type=int, default=8192, metavar="N")
    demo.add_argument("--api", default="chat", choices=("chat", "messages", "responses"),
                      help="the wire API of the request: chat (/v1/chat/completions, the "
                      "default), messages (Anthropic /v1/messages, as Claude Code sends it) "
                      "or responses (OpenAI /v1/responses, as Codex sends it)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    args = build_parser().parse_args(argv)
    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "simulate":
            return _simulate(args)
        if args.command == "replay":
            return _replay(args)
        if args.command == "traces":
            return _label(args)
        if args.command == "calibrate":
            return _calibrate(args)
        if args.command == "demo":
            from sidecar.service.demo import run_demo

            return run_demo(tokens_per_second=args.tokens_per_second,
                            max_tokens=args.max_tokens, out=sys.stdout, api=args.api)
    except ConfigError as exc:
        print(f"{PROG}: config error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 2


def _overrides(args: argparse.Namespace) -> dict[str, str]:
    return {k[4:]: v for k, v in vars(args).items() if k.startswith("opt:") and v is not None}


def _serve(args: argparse.Namespace) -> int:
    overrides = _overrides(args)
    cfg = load_config(args.config, overrides=overrides)
    from sidecar.service.activation import inherit

    inherited = inherit()  # the sockets of systemd socket activation, if any
    if cfg.workers > 1:
        from sidecar.service.workers import run_workers

        return run_workers(cfg, list(argv_of_serve(args)), inherited)
    _install_uvloop()
    from sidecar.service.server import run_server
    from sidecar.service.workers import WORKER_ENV

    # What is loaded by now (modules, configuration) lives as long as the process. Out of
    # the collector's generations, it is not walked again by every full collection under
    # load (256 streams at 50 tok/s: 41 -> 17 ms per full collection).
    gc.collect()
    gc.freeze()

    code: int = asyncio.run(run_server(
        cfg, lambda: load_config(args.config, overrides=overrides),
        reuse_port=os.environ.get(WORKER_ENV) == "1", inherited=inherited,
        config_file=args.config))
    return code


def argv_of_serve(args: argparse.Namespace) -> list[str]:
    """The ``serve`` command line that reproduces ``args`` (for worker processes)."""
    out = ["serve"]
    if args.config is not None:
        out += ["--config", str(args.config)]
    for key, value in _overrides(args).items():
        out += [_flag_name(key), value]
    return out


def _simulate(args: argparse.Namespace) -> int:
    from sidecar.simulator import SimulatorConfig, run_simulator

    host, port = parse_host_port(args.listen)
    if args.tokens_per_second < 0:
        raise ConfigError("key 'tokens_per_second': must be >= 0")
    if args.replay is not None and not args.replay.is_file():
        raise ConfigError(f"key 'replay': no such file {args.replay}")
    _install_uvloop()
    config = SimulatorConfig(tokens_per_second=args.tokens_per_second, replay_file=args.replay,
                             dialect=args.dialect)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        server = asyncio.create_task(run_simulator(config, host, port))
        print(f"{PROG}: simulated {args.dialect} node on http://{host}:{port}",
              file=sys.stderr)
        await stop.wait()
        server.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await server

    asyncio.run(run())
    return 0


def _replay(args: argparse.Namespace) -> int:
    from sidecar.service.replay import run_replay

    cfg: Config = load_config(args.config, env={}) if args.config else Config()
    out: TextIO = sys.stdout
    return run_replay(args.traces, cfg.detectors, as_json=args.json, out=out)


def _label(args: argparse.Namespace) -> int:
    from sidecar.traces.label import run_label

    if args.tail < 1:
        raise ConfigError("key 'tail': must be at least 1")
    try:
        run_label(args.dir, sys.stdin, sys.stdout, tail=args.tail, relabel=args.all)
    except (OSError, ValueError) as exc:
        print(f"{PROG}: traces label: {exc}", file=sys.stderr)
        return 2
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    from sidecar.service.calibrate import run_calibrate

    if args.margin <= 1:
        raise ConfigError("key 'margin': must be above 1")
    if args.min_healthy < 1 or args.html_limit < 0:
        raise ConfigError("key 'min_healthy': must be at least 1 (and html_limit >= 0)")
    cfg: Config = load_config(args.config, env={}) if args.config else Config()
    return run_calibrate(args.dir, cfg, json_out=args.json, html=args.html,
                         margin=args.margin, min_healthy=args.min_healthy,
                         limit=args.html_limit, out=sys.stdout)


def _install_uvloop() -> None:
    """Use uvloop when it is installed (the ``fast`` extra) and not disabled."""
    if os.environ.get("RUNAWAY_SIDECAR_NO_UVLOOP"):
        return
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


if __name__ == "__main__":
    raise SystemExit(main())
