#!/usr/bin/env python3
"""Load checks of the OpenAI HTTP API over loopback: connection bursts, idle connections,
many concurrent streams, slow readers. Prints one JSON line of figures per check.

    tools/http_load.py --bin_dir build/bin burst   --connections 500
    tools/http_load.py --bin_dir build/bin idle    --connections 10000 --samples 10
    tools/http_load.py --bin_dir build/bin streams --streams 2000
    tools/http_load.py --bin_dir build/bin slow    --streams 50

Each check starts its own local cluster on stories260K ($FOLIO_MODELS_DIR, else the
embedded one) through
tools/serve.py, or uses --port of a running frontend. The idle connections live in a
separate process (`hold`), as a gateway's would. "resets" counts connections that failed
(refused, reset, or closed before a whole answer). RSS is the frontend's, from /proc.
"""
import argparse
import asyncio
import json
import os
import resource
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "http"))


def rss_mb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def completion(prompt="Once upon a time", max_tokens=16, stream=True, **extra):
    body = json.dumps(dict(prompt=prompt, max_tokens=max_tokens, stream=stream, **extra)).encode()
    return (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


async def one_request(port, request, rcvbuf=None, read=True):
    """(status, ttft_s, complete, reset): sends `request`, reads until the server closes.
    For a 4xx/5xx, `complete` says whether the body is OpenAI's error object."""
    start = time.monotonic()
    try:
        if rcvbuf:
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
            reader, writer = await asyncio.open_connection(sock=sock, limit=1 << 20)
        else:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
        writer.write(request)
        await writer.drain()
        if not read:
            return reader, writer
        data = b""
        ttft = None
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                break
            data += chunk
            if ttft is None and b"data: {" in data:
                ttft = time.monotonic() - start
        writer.close()
    except (ConnectionError, OSError):
        return 0, None, False, True
    if not data.startswith(b"HTTP/1.1 "):
        return 0, None, False, True
    status = int(data[9:12])
    if status >= 400:
        try:
            err = json.loads(data.split(b"\r\n\r\n", 1)[1]).get("error", {})
            complete = isinstance(err.get("message"), str) and isinstance(err.get("type"), str)
        except (ValueError, IndexError, AttributeError):
            complete = False
    elif status == 200 and b"text/event-stream" in data:
        complete = b"data: [DONE]" in data
    else:
        complete = b"\r\n\r\n" in data
    return status, ttft, complete, False


async def burst(port, n):
    req = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    results = await asyncio.gather(*[one_request(port, req) for _ in range(n)])
    return {"check": "burst", "connections": n, "ok": sum(1 for r in results if r[0] == 200),
            "resets": sum(1 for r in results if r[3])}


async def ttft_samples(port, samples):
    out = []
    for _ in range(samples):
        status, ttft, complete, reset = await one_request(port, completion(max_tokens=8))
        if status == 200 and ttft is not None:
            out.append(ttft * 1000)
    out.sort()
    return out


async def hold(port, n):
    """Opens n keep-alive connections, one request each, then keeps them open."""
    req = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
    conns = []
    failed = 0

    async def open_one():
        nonlocal failed
        try:
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(req)
            await w.drain()
            head = await r.readuntil(b"\r\n\r\n")
            length = int([l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")][0].split(b":")[1])
            await r.readexactly(length)
            conns.append((r, w))
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            failed += 1
    for i in range(0, n, 500):
        await asyncio.gather(*[open_one() for _ in range(min(500, n - i))])
    print(json.dumps({"held": len(conns), "failed": failed}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until told to stop
    alive = 0
    for r, w in conns:
        if not r.at_eof():
            alive += 1
    print(json.dumps({"still_open": alive}), flush=True)


def median(xs):
    return xs[len(xs) // 2] if xs else None


async def idle(port, n, samples, frontend_pid):
    base = await ttft_samples(port, samples)
    holder = subprocess.Popen([sys.executable, os.path.abspath(__file__), "hold", "--port", str(port),
                               "--connections", str(n)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    held = json.loads(holder.stdout.readline())
    rss_with = rss_mb(frontend_pid) if frontend_pid else None
    loaded = await ttft_samples(port, samples)
    holder.stdin.close()
    still = json.loads(holder.stdout.readline())
    holder.wait()
    return {"check": "idle", "connections_asked": n, "held": held["held"], "failed": held["failed"],
            "still_open_after": still["still_open"],
            "ttft_ms_median_without": median(base), "ttft_ms_median_with": median(loaded),
            "ttft_ms_max_with": max(loaded) if loaded else None, "frontend_rss_mb_with": rss_with}


async def streams(port, n, max_tokens, frontend_pid):
    peak = [rss_mb(frontend_pid) or 0]
    done = asyncio.Event()

    async def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_mb(frontend_pid) or 0)
            await asyncio.sleep(0.2)
    sampler = asyncio.create_task(sample()) if frontend_pid else None
    start = time.monotonic()
    results = await asyncio.gather(*[one_request(port, completion(max_tokens=max_tokens)) for _ in range(n)])
    done.set()
    if sampler:
        await sampler
    by_status = {}
    for r in results:
        by_status[str(r[0])] = by_status.get(str(r[0]), 0) + 1
    return {"check": "streams", "streams": n, "max_tokens": max_tokens, "by_status": by_status,
            "complete_200": sum(1 for r in results if r[0] == 200 and r[2]),
            "incomplete_200": sum(1 for r in results if r[0] == 200 and not r[2]),
            "429_with_error_object": sum(1 for r in results if r[0] == 429 and r[2]),
            "resets": sum(1 for r in results if r[3]), "seconds": round(time.monotonic() - start, 1),
            "frontend_rss_mb_peak": peak[0] if frontend_pid else None}


def slow(port, n, frontend_pid):
    """n streams whose clients read nothing for 8 s (plain sockets with 4 KiB receive
    buffers; asyncio would read ahead for them): each must be cut with the error event."""
    rss_before = rss_mb(frontend_pid)
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", port))
        s.sendall(completion(max_tokens=480, ignore_eos=True))
        socks.append(s)
    peak = rss_before or 0
    t0 = time.time()
    for _ in range(40):  # 8 s
        time.sleep(0.2)
        peak = max(peak, rss_mb(frontend_pid) or 0)
    cut = 0
    done = 0
    for s in socks:
        s.settimeout(30)
        data = b""
        try:
            while True:
                chunk = s.recv(1 << 20)
                if not chunk:
                    break
                data += chunk
        except (ConnectionError, socket.timeout):
            pass
        if os.environ.get("FOLIO_LOAD_DEBUG"):
            print(len(data), round(time.time() - t0, 1), data[-20:], file=sys.stderr)
        cut += b"stream_cut" in data
        done += b"data: [DONE]" in data and b"stream_cut" not in data
        s.close()
    return {"check": "slow", "streams": n, "cut_with_error_event": cut, "finished_anyway": done,
            "frontend_rss_mb_before": rss_before, "frontend_rss_mb_peak": peak}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("check", choices=["burst", "idle", "streams", "slow", "hold"])
    p.add_argument("--bin_dir")
    p.add_argument("--port", type=int, help="a running frontend's HTTP port (no cluster is started)")
    p.add_argument("--connections", type=int, default=500)
    p.add_argument("--samples", type=int, default=10)
    p.add_argument("--streams", type=int, default=200)
    p.add_argument("--max_tokens", type=int, default=32)
    p.add_argument("--max_num_seqs", type=int, default=64)
    p.add_argument("--assert", dest="check_results", action="store_true",
                   help="exit 1 unless the figures hold: no resets, every idle connection held, "
                        "streams answered 200 (whole) or 429, slow readers cut (for ctest)")
    args = p.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if args.check == "hold":
        asyncio.run(hold(args.port, args.connections))
        return 0

    def run(port, pid):
        if args.check == "burst":
            return asyncio.run(burst(port, args.connections))
        if args.check == "idle":
            return asyncio.run(idle(port, args.connections, args.samples, pid))
        if args.check == "streams":
            return asyncio.run(streams(port, args.streams, args.max_tokens, pid))
        return slow(port, args.streams, pid)

    if args.port:
        print(json.dumps(run(args.port, None)))
        return 0
    from local_cluster import LocalCluster
    flags = [f"--max_num_seqs={args.max_num_seqs}",
             "--frontend_flag=--http_idle_timeout_ms=600000"]
    if args.check == "slow":
        flags += ["--frontend_flag=--http_stream_buffer_bytes=16384",
                  "--frontend_flag=--http_socket_send_buffer_bytes=16384",
                  "--frontend_flag=--http_write_timeout_ms=" + os.environ.get("FOLIO_LOAD_WRITE_TIMEOUT_MS", "30000")]
    with LocalCluster(args.bin_dir, flags) as c:
        result = run(c.http_port, c.frontend_pid())
        result["hard_nofile"] = hard
        print(json.dumps(result), flush=True)
    return 1 if args.check_results and not holds(result) else 0


def holds(r):
    """The figures a healthy server gives (no timing: those are reported, not asserted)."""
    problems = []
    if r.get("resets", 0):
        problems.append(f"{r['resets']} resets")
    if r["check"] == "burst" and r["ok"] != r["connections"]:
        problems.append(f"{r['connections'] - r['ok']} connections not answered")
    if r["check"] == "idle" and not (r["held"] == r["still_open_after"] == r["connections_asked"]):
        problems.append("idle connections were not all held")
    if r["check"] == "streams":
        if set(r["by_status"]) - {"200", "429"} or r["incomplete_200"]:
            problems.append(f"answers other than a whole 200 or a 429: {r['by_status']}")
        if r["429_with_error_object"] != r["by_status"].get("429", 0):
            problems.append("a 429 without OpenAI's error object")
    if r["check"] == "slow" and r["cut_with_error_event"] != r["streams"]:
        problems.append("slow readers not all cut with the error event")
    for p in problems:
        print("FAILED: " + p, file=sys.stderr)
    return not problems


if __name__ == "__main__":
    sys.exit(main())
