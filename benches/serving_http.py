"""``kstate serve`` under a bounded load (issue 42): p50 / p99 of HTTP reads from a real client.
benches/README.md, "Serving".

    .venv/bin/python benches/serving_http.py [--keys 1000000] [--seconds 10] [--concurrency 1 4 16]

An application of ``--keys`` keys is written without Spark (as benches/serving.py writes it);
``kstate serve`` runs in a process of its own on loopback, following every second; the client
(httpx's ``AsyncClient``, one connection per worker, in this process) keeps ``concurrency``
requests in flight (a closed loop: each worker sends its next request when the last one
answered) for ``--seconds`` per row, uniformly drawn present keys: ``GET /stores/counts/get``
and ``POST /stores/counts/get_many`` of 100 keys. Server and client share the machine's cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from serving import APPLICATION, key_of, write_application  # noqa: E402

MANY = 100


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(where: str, port: int) -> subprocess.Popen:
    command = [sys.executable, "-m", "kstate.cli", "serve", f"{where}/changelog", "--application-id", APPLICATION]
    command += ["--port", str(port), "--local-dir", f"{where}/replica"]
    server = subprocess.Popen(command, env=os.environ.copy())
    deadline = time.monotonic() + 600
    while True:
        if server.poll() is not None:
            raise SystemExit("kstate serve exited")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                return server
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("kstate serve did not answer")
        time.sleep(0.2)


async def load(base: str, keys: int, concurrency: int, seconds: float, many: bool) -> dict:
    latencies: list[float] = []
    batches: list[int] = []

    async def worker(seed: int) -> None:
        rng = random.Random(seed)
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            stop = time.perf_counter() + seconds
            while time.perf_counter() < stop:
                started = time.perf_counter()
                if many:
                    wanted = [key_of(rng.randrange(keys)) for _ in range(MANY)]
                    response = await client.post("/stores/counts/get_many", json=wanted)
                else:
                    wanted = [key_of(rng.randrange(keys))]
                    response = await client.get("/stores/counts/get", params={"key": wanted[0]})
                latencies.append(time.perf_counter() - started)
                body = response.json()
                values = body["value"] if many else [body["value"]]
                if response.status_code != 200 or values != [int(k[4:]) for k in wanted]:
                    raise SystemExit(f"wrong answer: {response.status_code} {body}")
                batches.append(body["batch_id"])

    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "read": f"get_many ({MANY} keys)" if many else "get",
        "concurrency": concurrency,
        "requests_per_s": len(latencies) / elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1e3,
        "p99_ms": latencies[len(latencies) * 99 // 100] * 1e3,
        "requests": len(latencies),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    where = tempfile.mkdtemp(prefix="serving-http-", dir=args.dir)
    server = None
    try:
        write_application(where, args.keys)
        port = free_port()
        server = start_server(where, port)
        base = f"http://127.0.0.1:{port}"
        asyncio.run(load(base, args.keys, 1, 2, False))  # warm-up
        rows = []
        for many in (False, True):
            for concurrency in args.concurrency:
                row = asyncio.run(load(base, args.keys, concurrency, args.seconds, many))
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)
        shutil.rmtree(where, ignore_errors=True)
    print(f"\n{args.keys:,} keys; {args.seconds:.0f} s per row\n")
    print("| read | in flight | requests/s | p50 ms | p99 ms |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['read']} | {r['concurrency']} | {r['requests_per_s']:,.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} |"
        )


if __name__ == "__main__":
    main()
