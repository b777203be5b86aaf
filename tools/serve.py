#!/usr/bin/env python3
"""Runs a local Folio cluster: cachemgr, worker, scheduler and frontend on loopback.

Started by `./folio serve`, which builds first. Internal services take free ports of their
own (so two clusters can run side by side); the frontend listens on --port (50051). The
launcher waits until every service reports SERVING on grpc.health.v1, prints the
endpoints, and on Ctrl-C (or SIGTERM) stops the services front to back.

Supervisor: a service that dies is started again with the same command line and ports,
after a backoff (0.5 s doubling to 30 s; reset once it has run a minute), with a line
saying so, as Kubernetes restarts a container. The scheduler heals its replica when a
worker or the cache manager comes back (services/scheduler/recovery.h). --no_supervise
stops the whole cluster instead.
"""
import argparse
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time


def log(msg):
    print(f"[folio serve] {msg}", file=sys.stderr, flush=True)


def default_model(root, bin_dir):
    """--model's default: $FOLIO_MODEL, $FOLIO_MODELS_DIR/stories260K, then the embedded
    stories260K (models/ in a checkout, or beside bin/ in an installed tree)."""
    if os.environ.get("FOLIO_MODEL"):
        return os.environ["FOLIO_MODEL"]
    candidates = []
    if os.environ.get("FOLIO_MODELS_DIR"):
        candidates.append(os.path.join(os.environ["FOLIO_MODELS_DIR"], "stories260K", "stories260K.gguf"))
    candidates.append(os.path.join(root, "models", "stories260K", "stories260K.gguf"))
    candidates.append(os.path.join(bin_dir, "..", "models", "stories260K", "stories260K.gguf"))
    for c in candidates:
        if os.path.exists(c):
            return os.path.abspath(c)
    return None


def die_with_parent():
    """Runs in each child before exec: the kernel sends it SIGTERM when serve.py dies, even
    by SIGKILL, so no service outlives its supervisor holding the cluster's ports."""
    PR_SET_PDEATHSIG = 1
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


class Service:
    def __init__(self, name, argv, run_dir):
        self.name = name
        self.argv = argv
        self.port_file = os.path.join(run_dir, f"{name}.ports.json")
        self.log_path = os.path.join(run_dir, f"{name}.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(argv + [f"--port_file={self.port_file}"],
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     preexec_fn=die_with_parent)
        self.ports = None
        self.restarts = 0          # restarts in a row (reset once it has run a while)
        self.started = time.time()
        self.restart_at = None     # when a dead process is due to start again

    def restart(self):
        """Starts the process again with the same command line and the same ports, as
        Kubernetes restarts a container in place; its log continues in the same file."""
        same_ports = [f"--port={self.ports['grpc_port']}",
                      f"--metrics_port={self.ports['metrics_port']}"]
        if self.ports.get("http_port", -1) > 0:
            same_ports.append(f"--http_port={self.ports['http_port']}")
        try:
            os.remove(self.port_file)
        except OSError:
            pass
        self.log.write(f"[folio serve] restarting {self.name}\n")
        self.log.flush()
        self.proc = subprocess.Popen(self.argv + same_ports + [f"--port_file={self.port_file}"],
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     preexec_fn=die_with_parent)
        self.started = time.time()
        self.restart_at = None

    def wait_ports(self, timeout_s):
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with code {self.proc.returncode}")
            try:
                with open(self.port_file) as f:
                    self.ports = json.load(f)
                return self.ports
            except (OSError, ValueError):
                time.sleep(0.05)
        raise RuntimeError(f"{self.name} did not start listening within {timeout_s} s")

    @property
    def address(self):
        return f"127.0.0.1:{self.ports['grpc_port']}"

    def tail(self, lines=20):
        try:
            with open(self.log_path) as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""


def port_in_use(host, port):
    """True when a process listens on `port` of `host` (bound as gRPC binds: SO_REUSEADDR,
    so a port left in TIME_WAIT counts as free)."""
    if port <= 0:
        return False
    try:
        infos = socket.getaddrinfo(host.strip("[]") or None, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return False  # the frontend names a bad --host itself
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(address)
            except OSError:
                return True
    return False


def restart_delay(restarts):
    """Seconds to wait before restart number `restarts` (0 = the first): 0.5 s doubling
    up to 30 s, as Kubernetes' CrashLoopBackOff does (from 10 s up to 5 min there)."""
    return min(0.5 * (2 ** restarts), 30.0)


# A process that ran this long before dying starts again without backoff.
RUN_RESETS_BACKOFF_S = 60


def supervise(services, info=None):
    """One pass of the supervisor: a child that died is restarted after its backoff, with
    a line saying so. Returns the services restarted in this pass."""
    restarted = []
    now = time.time()
    for s in services:
        if s.proc.poll() is None:
            if s.restarts and now - s.started > RUN_RESETS_BACKOFF_S:
                s.restarts = 0
            continue
        if s.restart_at is None:
            delay = restart_delay(s.restarts)
            s.restart_at = now + delay
            log(f"{s.name} exited with code {s.proc.returncode}; restarting it in {delay:g} s "
                f"(restart {s.restarts + 1}) with the same command line and ports; "
                f"log: {s.log_path}")
            log(s.tail(5))
        elif now >= s.restart_at:
            s.restarts += 1
            s.restart()
            log(f"{s.name} restarted (pid {s.proc.pid})")
            restarted.append(s)
    return restarted


def healthy(cli, address, tls_flags=()):
    r = subprocess.run([cli, "health", f"--server={address}"] + list(tls_flags),
                       capture_output=True, text=True)
    return r.returncode == 0 and "NOT_SERVING" not in r.stdout


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = argparse.ArgumentParser(
        prog="folio serve", formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Run a local Folio cluster: cache manager, workers and scheduler per "
                    "replica, one frontend (gRPC and OpenAI-compatible HTTP) in front.")
    p.add_argument("--bin_dir", default=os.path.join(root, "build", "bin"),
                   help="where the folio binaries are (./folio serve builds them there)")
    p.add_argument("--model", help="GGUF file, Hugging Face checkpoint folder (config.json, "
                   "safetensors, tokenizer.json) or llama2.c checkpoint (default: stories260K)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address the frontend's gRPC and HTTP ports bind (0.0.0.0: every "
                        "interface); the internal services stay on loopback")
    p.add_argument("--port", type=int, default=50051,
                   help="frontend gRPC port (0: a free port, said on start and in --info_file)")
    p.add_argument("--http_port", type=int, default=8000,
                   help="port of the frontend's OpenAI-compatible HTTP API (-1: off, "
                        "0: a free port, said on start and in --info_file)")
    p.add_argument("--chat_template",
                   help="a Jinja chat template file for /v1/chat/completions, in place of the "
                        "model's own")
    p.add_argument("--reasoning_parser", default="auto", choices=["auto", "think", "none"],
                   help="split <think>...</think> off chat answers into reasoning_content "
                        "(auto: when the chat template mentions <think>)")
    p.add_argument("--tool_call_parser", choices=["llama3_json", "hermes", "mistral"],
                   help="how tool calls are read out of the model's output (default: by the "
                        "chat template's family)")
    p.add_argument("--block_size", type=int, default=16, help="tokens per KV block")
    p.add_argument("--kv_cache_bytes", default="256MiB", help="KV cache budget of the worker")
    p.add_argument("--kv_dtype", default="f16", choices=["f16", "f32", "q8_0"],
                   help="KV cache element type of the worker (q8_0: 8-bit, about half the bytes "
                        "of f16 per token; CPU only)")
    p.add_argument("--kv_host_bytes", default="0",
                   help="KV offload tier in host memory (e.g. 2GiB): every computed KV block is "
                        "also kept in a shared-memory segment per worker, so prefixes evicted "
                        "from the pool, or lost with a restarted worker, load back instead of "
                        "being recomputed. 0 (default): off. CPU workers only; needs room in "
                        "/dev/shm")
    p.add_argument("--kv_disk_dir", default="",
                   help="KV offload tier on disk, below --kv_host_bytes: a directory for block "
                        "files (one per block and worker rank, under a folder named by the "
                        "model's content), so cached prompts survive a restart of the whole "
                        "cluster, and replicas sharing the directory load each other's blocks. "
                        "Empty (default): off")
    p.add_argument("--kv_disk_bytes", default="0",
                   help="--kv_disk_dir's budget per worker rank (e.g. 20GiB)")
    p.add_argument("--served_model_name", action="append", default=[],
                   help="a name the HTTP API answers to in \"model\" (repeatable; the first is "
                        "the id /v1/models gives; default: the model file's name)")
    p.add_argument("--api_key", action="append", default=[],
                   help="require this key (Authorization: Bearer KEY) on both APIs (repeatable)")
    p.add_argument("--api_key_file", help="a file of keys, one per line, as --api_key")
    p.add_argument("--policy", default="paged", choices=["paged", "contiguous"],
                   help="KV allocation: paged (PagedAttention) or contiguous (one reservation "
                        "per request, the baseline the paper compares with)")
    p.add_argument("--max_num_seqs", type=int, default=64,
                   help="sequences the scheduler runs in one step, at most")
    p.add_argument("--async_steps", default="auto", choices=["auto", "on", "off"],
                   help="pipelined steps: the scheduler plans the next step while the workers "
                        "run this one. auto = off here, where the workers' threads take every "
                        "core the scheduler would plan on (measured 0.96x the throughput on 2 "
                        "cores, docs/benchmarks.md); on where they do not share cores")
    p.add_argument("--preemption", default="recompute", choices=["recompute", "swap"],
                   help="a request preempted for want of KV blocks: recompute what it loses "
                        "when it resumes, or swap its KV out to the host KV tier and load it "
                        "back (needs --kv_host_bytes; default: %(default)s)")
    p.add_argument("--speculative", default="off", choices=["off", "ngram", "draft"],
                   help="speculative decoding: ngram proposes each sequence's next tokens from "
                        "its own prompt and output, draft has --draft_model propose them, and "
                        "the model verifies several in one step; the text is the same as with "
                        "off (CPU workers only; default: %(default)s)")
    p.add_argument("--draft_model", default="",
                   help="--speculative=draft: a small model with the same tokenizer (a GGUF "
                        "file or Hugging Face folder), run in every worker; one rank only")
    p.add_argument("--num_speculative_tokens", type=int, default=4,
                   help="proposals verified per sequence and step, at most (default: "
                        "%(default)s)")
    p.add_argument("--spec_ngram_min", type=int, default=2,
                   help="n-gram proposals: the shortest suffix matched (default: %(default)s)")
    p.add_argument("--spec_ngram_max", type=int, default=4,
                   help="n-gram proposals: the longest suffix matched (default: %(default)s)")
    p.add_argument("--spec_max_batch", type=int, default=8,
                   help="no sequence speculates in a step with more decoding sequences than "
                        "this (default: %(default)s)")
    p.add_argument("--spec_synth_len", type=float, default=0,
                   help="benchmarks only: accept proposals synthetically so each verification "
                        "gains this many tokens on average; the text is NOT the model's "
                        "(default: off)")
    p.add_argument("--max_num_batched_tokens", type=int, default=512,
                   help="tokens one step computes, at most (prefill chunks plus decodes)")
    p.add_argument("--max_model_len", type=int, default=0,
                   help="cap on prompt plus output tokens (0: the model's context)")
    p.add_argument("--reserve_max_model_len", action="store_true",
                   help="each sequence reserves max_model_len tokens, not prompt + max_tokens "
                        "(with --policy=contiguous: a reservation system that cannot know the "
                        "output length)")
    p.add_argument("--no_prefix_caching", action="store_true",
                   help="do not reuse the KV of prompt prefixes seen before")
    p.add_argument("--info_file",
                   help="once serving, write the services' addresses and /metrics URLs here (JSON)")
    p.add_argument("--threads", type=int, default=0,
                   help="threads per worker rank (0: all cores, shared out over the ranks)")
    p.add_argument("--tp", type=int, default=1,
                   help="tensor-parallel degree: worker ranks splitting the model (must divide "
                        "its KV head count)")
    p.add_argument("--startup_timeout_s", type=int, default=300,
                   help="give up when the cluster is not serving within this many seconds")
    p.add_argument("--no_supervise", action="store_true",
                   help="stop the whole cluster when one service dies, instead of restarting "
                        "that service (with backoff) as Kubernetes would")
    p.add_argument("--tls_dir",
                   help="folder with ca.crt, tls.crt and tls.key (a Kubernetes TLS secret's "
                        "layout): mutual TLS between every service, TLS on the frontend's gRPC "
                        "port (client certificate required) and HTTPS on its HTTP API")
    p.add_argument("--replicas", type=int, default=1,
                   help="model replicas (each its own cache manager, workers and scheduler, the "
                        "CPU threads split between them) behind one frontend, which routes by "
                        "--frontend_flag=--routing=kv|least-loaded|round-robin|random (default kv)")
    p.add_argument("--frontend_flag", action="append", default=[],
                   help="extra flag for folio-frontend (repeatable), e.g. --frontend_flag=--http_idle_timeout_ms=600000")
    args = p.parse_args()
    # The worker's oneDNN bf16 path runs on libgomp, which reads OMP_WAIT_POLICY only when
    # it loads: passive, so its idle threads block instead of spinning beside the other
    # services (an explicit value is kept). Every service inherits it.
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")

    if args.tp < 1:
        log("--tp must be at least 1")
        return 2
    if args.replicas < 1:
        log("--replicas must be at least 1")
        return 2
    threads = args.threads
    if threads == 0 and args.tp * args.replicas > 1:
        threads = max(1, (os.cpu_count() or 1) // (args.tp * args.replicas))
    if args.model and not os.path.exists(args.model):
        log(f"--model: no such file or folder: {args.model}")
        return 2
    model = args.model or default_model(root, args.bin_dir)
    if not model or not os.path.exists(model):
        log("no model: pass --model=PATH (a GGUF file, a Hugging Face checkpoint folder or a "
            "llama2.c checkpoint), or set "
            "FOLIO_MODEL, or FOLIO_MODELS_DIR to a folder holding stories260K/stories260K.gguf "
            "(the embedded models/stories260K/ is missing from this tree)")
        return 2
    if args.preemption == "swap" and args.kv_host_bytes in ("", "0"):
        log("--preemption=swap keeps preempted requests' KV in the host KV tier; give "
            "--kv_host_bytes too")
        return 2
    if (args.speculative == "draft") != bool(args.draft_model):
        log("--speculative=draft and --draft_model=FILE go together: the draft model proposes "
            "the tokens the model verifies")
        return 2
    if args.kv_disk_dir and args.kv_host_bytes in ("", "0"):
        log("--kv_disk_dir: the disk KV tier lies below the host tier; give --kv_host_bytes too")
        return 2
    if args.kv_disk_dir and args.kv_disk_bytes in ("", "0"):
        log("--kv_disk_dir needs a budget: --kv_disk_bytes (e.g. 20GiB)")
        return 2
    if args.kv_disk_dir:
        args.kv_disk_dir = os.path.abspath(args.kv_disk_dir)
    if args.chat_template and not os.path.isfile(args.chat_template):
        log(f"--chat_template: no such file {args.chat_template}")
        return 2
    b = lambda name: os.path.join(args.bin_dir, name)
    for name in ("folio-cachemgr", "folio-worker", "folio-scheduler", "folio-frontend", "folio-cli"):
        if not os.path.exists(b(name)):
            log(f"{name} is not built in {args.bin_dir}; run ./folio build")
            return 2

    tls = []
    if args.tls_dir:
        files = {n: os.path.join(os.path.abspath(args.tls_dir), n) for n in ("ca.crt", "tls.crt", "tls.key")}
        missing = [f for f in files.values() if not os.path.exists(f)]
        if missing:
            log("--tls_dir lacks " + ", ".join(missing))
            return 2
        tls = [f"--tls_cert={files['tls.crt']}", f"--tls_key={files['tls.key']}", f"--tls_ca={files['ca.crt']}"]
        args.frontend_flag = [f"--http_tls_cert={files['tls.crt']}", f"--http_tls_key={files['tls.key']}"] + args.frontend_flag

    # The frontend's ports are fixed: a taken one is said now, not after the model loads.
    for flag, port in (("--port", args.port), ("--http_port", args.http_port)):
        if port_in_use(args.host, port):
            log(f"{flag}={port}: port {port} on {args.host} is in use (another ./folio serve?); "
                f"stop that process or pick another {flag}")
            return 1

    run_dir = tempfile.mkdtemp(prefix="folio-serve-")
    log(f"model {model}" + (f", {args.tp} tensor-parallel worker ranks" if args.tp > 1 else ""))
    log(f"logs in {run_dir}")
    services = []
    segments = []  # the workers' host KV segments (--kv_host_bytes), removed at the end

    def stop_all(*_):
        for s in reversed(services):
            if s.proc.poll() is None:
                s.proc.send_signal(signal.SIGTERM)
        for s in reversed(services):
            try:
                s.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                s.proc.kill()
        for name in segments:
            try:
                os.unlink(os.path.join("/dev/shm", name))
            except FileNotFoundError:
                pass
        log("stopped")

    try:
        # One replica keeps the plain names (cachemgr, worker, scheduler); with more, each
        # process is named after its replica (r0-scheduler, ...).
        replicas = []
        for ri in range(args.replicas):
            prefix = "" if args.replicas == 1 else f"r{ri}-"
            cachemgr = Service(prefix + "cachemgr",
                               [b("folio-cachemgr"), f"--block_size={args.block_size}"] + tls, run_dir)
            services.append(cachemgr)
            # Rank 0 first: the other ranks find their group through its gRPC port.
            workers = []
            for rank in range(args.tp):
                argv = [b("folio-worker"), f"--model={model}", f"--kv_cache_bytes={args.kv_cache_bytes}",
                        f"--kv_dtype={args.kv_dtype}", f"--num_threads={threads}"] + tls
                if args.draft_model:
                    argv.append(f"--draft_model={args.draft_model}")
                if args.kv_host_bytes not in ("", "0"):
                    # Named by this run, replica and rank: a restarted worker finds it again.
                    segment = f"folio-kv-{os.getpid()}-r{ri}-rank{rank}"
                    segments.append(segment)
                    argv += [f"--kv_host_bytes={args.kv_host_bytes}", f"--kv_host_name={segment}"]
                    if args.kv_disk_dir:
                        argv += [f"--kv_disk_dir={args.kv_disk_dir}",
                                 f"--kv_disk_bytes={args.kv_disk_bytes}"]
                if args.tp > 1:
                    argv += [f"--tp_size={args.tp}", f"--tp_rank={rank}"]
                    if rank > 0:
                        argv.append(f"--tp_rendezvous={workers[0].address}")
                name = prefix + ("worker" if args.tp == 1 else f"worker{rank}")
                worker = Service(name, argv, run_dir)
                services.append(worker)
                workers.append(worker)
                worker.wait_ports(args.startup_timeout_s)
            cachemgr.wait_ports(args.startup_timeout_s)
            scheduler = Service(prefix + "scheduler", [
                b("folio-scheduler"), f"--cachemgr={cachemgr.address}",
                "--workers=" + ",".join(w.address for w in workers),
                f"--block_size={args.block_size}", f"--policy={args.policy}",
                f"--max_num_seqs={args.max_num_seqs}",
                f"--async_steps={'off' if args.async_steps == 'auto' else args.async_steps}",
                f"--max_num_batched_tokens={args.max_num_batched_tokens}",
                f"--preemption={args.preemption}",
                f"--speculative={args.speculative}",
                f"--num_speculative_tokens={args.num_speculative_tokens}",
                f"--spec_synth_len={args.spec_synth_len}",
                f"--spec_ngram_min={args.spec_ngram_min}",
                f"--spec_ngram_max={args.spec_ngram_max}",
                f"--spec_max_batch={args.spec_max_batch}",
                f"--max_model_len={args.max_model_len}",
                f"--enable_prefix_caching={'false' if args.no_prefix_caching else 'true'}",
                f"--reserve_max_model_len={'true' if args.reserve_max_model_len else 'false'}"] + tls, run_dir)
            services.append(scheduler)
            scheduler.wait_ports(args.startup_timeout_s)
            replicas.append({"scheduler": scheduler, "cachemgr": cachemgr, "workers": workers})
        if args.replicas == 1:
            frontend_target = f"--scheduler={scheduler.address}"
        else:
            frontend_target = "--replicas=" + ",".join(r["scheduler"].address for r in replicas)
        frontend_argv = [b("folio-frontend"), frontend_target, f"--host={args.host}",
                         f"--port={args.port}", f"--http_port={args.http_port}"]
        if args.served_model_name:
            frontend_argv.append("--served_model_name=" + ",".join(args.served_model_name))
        if args.api_key:
            frontend_argv.append("--api_key=" + ",".join(args.api_key))
        if args.api_key_file:
            frontend_argv.append(f"--api_key_file={os.path.abspath(args.api_key_file)}")
        if args.chat_template:
            frontend_argv.append(f"--chat_template={os.path.abspath(args.chat_template)}")
        if args.tool_call_parser:
            frontend_argv.append(f"--tool_call_parser={args.tool_call_parser}")
        frontend_argv.append(f"--reasoning_parser={args.reasoning_parser}")
        frontend = Service("frontend", frontend_argv + tls + args.frontend_flag, run_dir)
        services.append(frontend)
        frontend.wait_ports(args.startup_timeout_s)

        deadline = time.time() + args.startup_timeout_s
        pending = list(services)
        while pending:
            for s in pending:
                if s.proc.poll() is not None:
                    raise RuntimeError(f"{s.name} exited with code {s.proc.returncode}")
            pending = [s for s in pending if not healthy(b("folio-cli"), s.address, tls)]
            if pending and time.time() > deadline:
                raise RuntimeError("not SERVING in time: " + ", ".join(s.name for s in pending))
            if pending:
                time.sleep(0.2)
    except (RuntimeError, KeyboardInterrupt) as e:
        log(f"start-up failed: {e}")
        for s in services:
            tail = s.tail()
            if tail:
                log(f"--- {s.name} log (last lines) ---\n{tail}")
        stop_all()
        log(f"logs kept in {run_dir}")
        return 1

    def write_info():
        info = {"run_dir": run_dir, "model": model, "policy": args.policy,
                "frontend": {"grpc": frontend.address,
                             "metrics": f"http://127.0.0.1:{frontend.ports['metrics_port']}/metrics",
                             "pid": frontend.proc.pid}}
        if frontend.ports.get("http_port", -1) > 0:
            info["frontend"]["http"] = f"{'https' if tls else 'http'}://127.0.0.1:{frontend.ports['http_port']}"
        describe = lambda s: {"grpc": s.address,
                              "metrics": f"http://127.0.0.1:{s.ports['metrics_port']}/metrics",
                              "pid": s.proc.pid}
        # Every replica's services under "replicas"; with one replica also at the top level
        # (scheduler, cachemgr, worker...), as before there were many.
        info["replicas"] = []
        for r in replicas:
            entry = {"scheduler": describe(r["scheduler"]), "cachemgr": describe(r["cachemgr"])}
            for w in r["workers"]:
                entry[w.name.split("-")[-1]] = describe(w)
            info["replicas"].append(entry)
        if len(replicas) == 1:
            for s in [scheduler, cachemgr] + workers:
                info[s.name] = describe(s)
        tmp = args.info_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump(info, f, indent=2)
        os.replace(tmp, args.info_file)  # readers never see half a file

    if args.info_file:
        write_info()
    print("Folio is serving.", flush=True)
    print(f"  frontend  grpc {frontend.address}   metrics http://127.0.0.1:{frontend.ports['metrics_port']}/metrics")
    for r in replicas:
        for s in [r["scheduler"], r["cachemgr"]] + r["workers"]:
            print(f"  {s.name:<12} grpc {s.address}   metrics http://127.0.0.1:{s.ports['metrics_port']}/metrics")
    if len(replicas) > 1:
        routing = next((f.split("=", 1)[1] for f in args.frontend_flag if f.startswith("--routing=")), "kv")
        print(f"  {len(replicas)} replicas behind the frontend, routed by {routing}")
    if frontend.ports.get("http_port", -1) > 0:
        http_url = f"{'https' if tls else 'http'}://{args.host if args.host not in ('0.0.0.0', '::') else '127.0.0.1'}:{frontend.ports['http_port']}"
        print(f"  frontend  http {http_url}/v1 (OpenAI-compatible)")
        print(f"  chat page {http_url}/ (open it in a browser)")
    print(f"Try: {b('folio-cli')} generate \"Once upon a time\" --server={frontend.address}", flush=True)
    print("Ctrl-C stops the cluster.", flush=True)

    done = []
    signal.signal(signal.SIGINT, lambda *_: done.append(1))
    signal.signal(signal.SIGTERM, lambda *_: done.append(1))
    while not done:
        if args.no_supervise:
            for s in services:
                if s.proc.poll() is not None:
                    log(f"{s.name} exited with code {s.proc.returncode}; stopping the cluster")
                    log(s.tail())
                    done.append(1)
                    break
        elif supervise(services) and args.info_file:
            write_info()  # new pids
        time.sleep(0.2)
    stop_all()
    # A clean stop leaves nothing behind; after a failure the logs stay (their path was
    # printed at the start).
    shutil.rmtree(run_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
