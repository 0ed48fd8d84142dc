"""The keep-alive race against a real uvicorn: requests written on an idle upstream
connection at the moment uvicorn closes it (after ``timeout_keep_alive``, 5 s, as vLLM
serves). All ``--clients`` clients send a short watched stream through the sidecar at
the same ticks, one every ``--period`` seconds (each ± ``--jitter``): the sidecar's
upstream connections then sit idle for about the period between two ticks, and with the
period at uvicorn's keep-alive the sidecar meets connections uvicorn is closing.

    .venv/bin/python -m benchmarks.keepalive_race --duration 60 \\
        --uvicorn-python ~/.cache/runaway-sidecar/vllm-venv/bin/python \\
        [--keepalive 15] [--root OTHER_CHECKOUT]

uvicorn is not a dependency of the project: ``--uvicorn-python`` names an interpreter that
has it (the real-vLLM venv of ``scripts/e2e-vllm.sh`` does). ``--keepalive`` sets the
sidecar's ``upstream_keepalive_seconds`` (15 s was the old fixed value); ``--root`` runs
``serve`` from another checkout (a before/after run; that checkout's own options apply,
so leave ``--keepalive`` out for one that has none). Prints requests, failures and the
sidecar's resend counter. Loopback only; bounded by ``--duration`` and ``--clients``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp

from benchmarks.procs import ROOT, Proc, free_port, running, sidecar

# A minimal ASGI app: a short OpenAI-style event stream for chat completions.
_APP = '''
CHUNK = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
         b'"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]}\\n\\n'
         b"data: [DONE]\\n\\n")


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream")]})
    await send({"type": "http.response.body", "body": CHUNK})
'''


def upstream(python: str, log_dir: Path) -> Proc:
    """uvicorn with its default keep-alive (5 s), serving ``_APP``."""
    (log_dir / "race_app.py").write_text(_APP)
    port = free_port()
    proc = Proc("uvicorn", [python, "-B", "-m", "uvicorn", "race_app:app", "--host",
                            "127.0.0.1", "--port", str(port), "--timeout-keep-alive", "5",
                            "--log-level", "warning", "--no-access-log"], port)
    proc.cwd = log_dir
    return proc


async def client(url: str, stop_at: float, args: argparse.Namespace, seed: int,
                 counts: dict[str, int], errors: list[str]) -> None:
    rng = random.Random(seed)
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    tick = stop_at - args.duration
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s:
        while True:
            tick += args.period
            if tick >= stop_at:
                return
            await asyncio.sleep(max(0.0, tick + rng.uniform(-args.jitter, args.jitter)
                                    - time.monotonic()))
            try:
                async with s.post(url + "/v1/chat/completions", json=body,
                                  headers={"X-Runaway-Mode": "shadow"}) as resp:
                    data = await resp.read()
                ok = resp.status == 200 and data.endswith(b"data: [DONE]\n\n")
                detail = f"{resp.status} {data[:160]!r}"
            except (aiohttp.ClientError, OSError) as exc:
                ok, detail = False, repr(exc)
            counts["requests"] += 1
            if not ok:
                counts["failed"] += 1
                if len(errors) < 5:
                    errors.append(detail)


async def resends(metrics_url: str) -> str:
    async with aiohttp.ClientSession() as s, s.get(metrics_url) as r:
        text = await r.text()
    found = re.findall(r'^runaway_sidecar_upstream_retries_total\{pool="(\w+)"\} (\S+)$',
                       text, re.MULTILINE)
    return ", ".join(f"{pool}={float(v):.0f}" for pool, v in found) or "no such metric"


async def load(url: str, metrics_url: str, args: argparse.Namespace) -> None:
    counts = {"requests": 0, "failed": 0}
    errors: list[str] = []
    stop_at = time.monotonic() + args.duration
    await asyncio.gather(*(client(url, stop_at, args, i, counts, errors)
                           for i in range(args.clients)))
    print(f"requests: {counts['requests']}, failed: {counts['failed']}")
    for line in errors:
        print(f"  {line}")
    print(f"sidecar resends: {await resends(metrics_url)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--uvicorn-python", required=True)
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--period", type=float, default=5.0)
    ap.add_argument("--jitter", type=float, default=0.005)
    ap.add_argument("--keepalive", type=float, default=None,
                    help="the sidecar's upstream_keepalive_seconds (default: its own)")
    ap.add_argument("--root", type=Path, default=ROOT, help="checkout to run serve from")
    args = ap.parse_args()
    log_dir = Path(tempfile.mkdtemp(prefix="runaway-race-"))
    up = upstream(args.uvicorn_python, log_dir)
    mport = free_port()
    extra = ("--log-level", "warning", "--metrics-listen", f"127.0.0.1:{mport}")
    if args.keepalive is not None:
        extra += ("--upstream-keepalive-seconds", str(args.keepalive))
    side = sidecar("sidecar", up.url, "shadow", root=args.root, extra=extra)
    # procs.sidecar already gives a --metrics-listen; the later one wins (argparse).
    with running([up, side], log_dir):
        asyncio.run(load(side.url, f"http://127.0.0.1:{mport}/metrics", args))
    print(f"logs: {log_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
