#!/usr/bin/env python3
"""Folio against llama.cpp on the 1.1B shape: decode, 32 x (128 + 32), serving (issue #21).

`./folio bench peer` measures, alternating the two engines in one sitting with the same
thread count (2 by default):

  1. single-stream decode tokens/s: Folio through its cluster (folio-bench --workload=fixed,
     one request at a time; 1000 / TPOT) against `llama-bench -p 0 -n N`;
  2. 32 sequences x (128 prompt + 32 generated), wall time: folio-bench --workload=fixed
     --max_concurrency=32 against `llama-batched-bench -npp 128 -ntg 32 -npl 32`;
  3. the serving workload of docs/benchmarks.md's peer section (sharegpt-like, 64 requests,
     32 clients, folio-bench's OpenAI backend against both HTTP servers) against
     `llama-server -np 8` and `-np 32`, each slot 1,024 tokens (the workload's 512 + 512),
     Folio with the KV memory of the largest of them.

on random-weight models of the 1.1B Llama shape (dim 2048, 16 layers, 32/8 heads, ffn 8192,
vocab 32000, context 4096) written by folio-make-model in F16 and quantized to Q8_0 and
Q4_K_M by llama.cpp's llama-quantize, cached in build/bench-models/peer/. llama.cpp runs
with `-fa on`; a tool that crashes on a quantized file with weight repacking on is rerun
with `--no-repack` where it has the flag (llama-batched-bench, llama-server; llama-bench
has none, so its decode figure then comes from `llama-batched-bench -npl 1 --no-repack`),
and the table says so.

The llama.cpp tools (llama-bench, llama-batched-bench, llama-server, llama-quantize) are
built once into build/llama-tools/RELEASE/: compiled alone (their own sources, plus
llama-server's mtmd and server libraries) against the prebuilt libllama / libllama-common /
libggml* of npm's node-llama-cpp in build/reference (the same release as its source
bundle, build/reference/llama.cpp; `./folio reference` installs both), which takes minutes
on 2 cores, not the ~30 of a full llama.cpp build. The build runs under `nice -n 19` with
-j2 and never in CI; --llama_bin uses another build's tools instead.

Output (--out): results.json (configuration, machine, load average before and after each
measurement, every command, every figure; rewritten after each measurement, so an
interrupted run keeps what it measured), table.md (the one table of ratios, with the
command), logs/ and runs/ (each tool's output, folio-bench's result JSONs).
--write_docs puts the table into docs/benchmarks.md between the peer markers.

--smoke: a tiny shape (dim 256, 2 layers), a few requests; never builds llama.cpp; with
no llama.cpp build cached it says so and measures Folio alone (ctest's peer_smoke_test).
"""

import argparse
import datetime
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
import urllib.request

import _cluster
import _llama_tools
import peer_analysis as pa
from _cluster import ROOT, log, quote

FULL_SHAPE = {"dim": 2048, "layers": 16, "heads": 32, "kv_heads": 8, "hidden_dim": 8192,
              "vocab": 32000, "context": 4096, "name": "1.1b"}
# A Qwen3-MoE-shaped model (Qwen3-30B-A3B's width, heads, expert width and 8 of 64 experts
# a token, as issue 48 allows; 8 layers so that the F16 file fits this machine's disk and
# memory): 2.6 B parameters, 0.45 B of them active a token.
MOE_SHAPE = {"dim": 2048, "layers": 8, "heads": 32, "kv_heads": 4, "head_dim": 128,
             "hidden_dim": 6144, "vocab": 32000, "context": 4096, "name": "moe-64x8",
             "arch": "qwen3moe", "experts": 64, "experts_used": 8, "expert_hidden_dim": 768,
             "decode_aim": 1.0}
SMOKE_SHAPE = {"dim": 256, "layers": 2, "heads": 4, "kv_heads": 2, "hidden_dim": 512,
               "vocab": 512, "context": 1024, "name": "smoke"}
# Workloads: (decode tokens, rounds), (sequences, prompt, generated), serving.
FULL_WORK = {"decode_tokens": 32, "rounds": 3, "batch": 32, "prompt": 128, "gen": 32,
             "requests": 64, "clients": 32, "max_input": 512, "max_output": 512,
             "np": [8, 32]}
SMOKE_WORK = {"decode_tokens": 8, "rounds": 1, "batch": 4, "prompt": 16, "gen": 8,
              "requests": 6, "clients": 3, "max_input": 48, "max_output": 16, "np": [2]}
MARK_BEGIN = "<!-- peer:begin (./folio bench peer --write_docs) -->"
MARK_END = "<!-- peer:end -->"


def parse_args(argv):
    p = argparse.ArgumentParser(prog="./folio bench peer", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin_dir", default=_cluster.DEFAULT_BIN_DIR,
                   help="Folio's binaries (folio-bench, folio-make-model, the services); "
                        "./folio bench passes build/bin")
    p.add_argument("--out", default=None,
                   help="output folder (default bench-results/peer-DATE, smoke: a temp folder)")
    p.add_argument("--smoke", action="store_true",
                   help="tiny shape, a few requests, no llama.cpp build (< 60 s)")
    p.add_argument("--shape", default="1.1b", choices=["1.1b", "moe"],
                   help="the model: 1.1b (the 1.1B Llama shape) or moe (Qwen3-MoE-shaped: "
                        "dim 2048, 8 layers, 64 experts of 768, 8 a token)")
    p.add_argument("--serve_arg", action="append", default=[],
                   help="an extra flag for Folio's ./folio serve (repeatable), e.g. "
                        "--serve_arg=--async_steps=on")
    p.add_argument("--types", default=None,
                   help="model types, comma-separated (default F16,Q8_0,Q4_K_M; smoke: F16, "
                        "plus Q8_0 when llama-quantize is cached); any llama-quantize type "
                        "Folio reads, e.g. Q4_0")
    p.add_argument("--serving_type", default=None,
                   help="the type the serving workload runs on (default Q4_K_M; smoke: the "
                        "first type; 'none' skips serving)")
    p.add_argument("--serving_model", default=None, metavar="GGUF",
                   help="run the serving workload on this file instead (e.g. "
                        "../shared/models/bench-28m-f16.gguf, the peer section's model), in a "
                        "cluster of its own; its shape is read with the reference's gguf-py")
    p.add_argument("--serving_np", default=None,
                   help="llama-server -np values, comma-separated (default 8,32; smoke 2); "
                        "Folio's KV is the largest one's -c (np x 1,024 tokens)")
    p.add_argument("--threads", type=int, default=2,
                   help="CPU threads of both engines (Folio --threads, llama.cpp -t/-tb)")
    p.add_argument("--rounds", type=int, default=None,
                   help="single-stream decode rounds, engines alternated (default 3; smoke 1)")
    p.add_argument("--parts", default="decode,batched,serving",
                   help="which measurements, comma-separated: decode, batched, serving")
    p.add_argument("--models_dir", default=None,
                   help="where the test models are written and cached (default "
                        "BUILD/bench-models/peer, BUILD being --bin_dir's parent)")
    p.add_argument("--llama_dir", default=None,
                   help="cache folder of the llama.cpp tools (default BUILD/llama-tools); "
                        "the llama.cpp reference is $FOLIO_REFERENCE_DIR, else BUILD/reference")
    p.add_argument("--llama_bin", default=None,
                   help="use llama-bench/-batched-bench/-server/-quantize from this folder "
                        "(any llama.cpp build) instead of the cache")
    p.add_argument("--build_llama", action="store_true",
                   help="build the llama.cpp tools if not cached, then go on (the default "
                        "outside --smoke and CI)")
    p.add_argument("--prepare", action="store_true",
                   help="only build the llama.cpp tools and write the test models (niced), "
                        "so that a later run at a quiet moment measures at once")
    p.add_argument("--no_build", action="store_true",
                   help="never build llama.cpp: without cached tools, measure Folio alone")
    p.add_argument("--no_repack", action="store_true",
                   help="always pass llama.cpp --no-repack (default: only after a crash)")
    p.add_argument("--write_docs", action="store_true",
                   help="replace the table between the peer markers in docs/benchmarks.md")
    p.add_argument("--tool_timeout_s", type=int, default=1800,
                   help="a llama.cpp tool run still going after this long is stopped and "
                        "reported as such (no figure; its time is then above this bound); a "
                        "serving run (either engine) stops sending and cuts off its requests "
                        "then (folio-bench --duration_s: they count as failed)")
    p.add_argument("--table_from", metavar="DIR", default=None,
                   help="only write DIR/table.md again from DIR/results.json (e.g. of an "
                        "interrupted run) and print it")
    p.add_argument("--startup_timeout_s", type=int, default=600,
                   help="how long a Folio cluster or llama-server may take to come up")
    args = p.parse_args(argv)
    build_dir = os.path.dirname(os.path.abspath(args.bin_dir))
    args.models_dir = args.models_dir or os.path.join(build_dir, "bench-models", "peer")
    args.llama_dir = args.llama_dir or os.path.join(build_dir, "llama-tools")
    args.reference_dir = _llama_tools.reference_dir(build_dir)
    args.shape = SMOKE_SHAPE if args.smoke else MOE_SHAPE if args.shape == "moe" else FULL_SHAPE
    args.work = dict(SMOKE_WORK if args.smoke else FULL_WORK)
    if args.rounds:
        args.work["rounds"] = args.rounds
    if args.serving_np:
        try:
            args.work["np"] = [int(x) for x in args.serving_np.split(",")]
        except ValueError:
            p.error(f"--serving_np: not a list of integers: {args.serving_np}")
        if not args.work["np"] or min(args.work["np"]) < 1:
            p.error(f"--serving_np: need values >= 1: {args.serving_np}")
    if args.serving_model and not os.path.exists(args.serving_model):
        p.error(f"--serving_model: no file {args.serving_model}")
    args.parts = [x for x in args.parts.split(",") if x and x != "none"]
    bad = set(args.parts) - {"decode", "batched", "serving"}
    if bad:
        p.error(f"--parts: unknown {', '.join(sorted(bad))}")
    return args


# --- processes -----------------------------------------------------------------------

def load_average():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


TIMED_OUT = "timed out"


def run_tool(argv, log_path, timeout_s):
    """Runs argv, its stdout to log_path and its stderr to log_path's .err.log; returns
    (exit code or -signal, stdout, stderr, peak RSS in MiB). Past timeout_s it is killed
    and the code is TIMED_OUT."""
    err_path = log_path[:-len(".log")] + ".err.log"
    with open(log_path, "w") as out, open(err_path, "w") as err:
        err.write("$ " + quote(argv) + "\n")
        err.flush()
        proc = subprocess.Popen(argv, stdout=out, stderr=err)
        deadline = time.time() + timeout_s
        try:
            while True:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                if time.time() > deadline:
                    proc.kill()
                    _, _, usage = os.wait4(proc.pid, 0)
                    status = None
                    break
                time.sleep(0.1)
        except BaseException:  # SIGTERM (SystemExit) or ^C: the tool must not outlive us
            proc.kill()
            os.wait4(proc.pid, 0)
            raise
        finally:
            proc.returncode = 0  # reaped by wait4: Popen must not wait for it again
    if status is None:
        rc = TIMED_OUT
    else:
        rc = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    with open(log_path) as f, open(err_path) as e:
        return rc, f.read(), e.read(), usage.ru_maxrss / 1024


def peak_rss_mib(pid, field="VmHWM"):
    """VmHWM (peak resident set; VmRSS: the current one) of a live process in MiB, or
    None."""
    try:
        with open(f"/proc/{pid}/status") as f:
            m = re.search(field + r":\s+(\d+) kB", f.read())
        return int(m.group(1)) / 1024 if m else None
    except OSError:
        return None


class LlamaServer:
    """llama-server for the length of a `with` block, healthy (GET /health) on entry."""

    def __init__(self, argv, log_path, timeout_s):
        self.argv, self.log_path, self.timeout_s = argv, log_path, timeout_s
        self.port = int(argv[argv.index("--port") + 1])
        self.proc = None

    def __enter__(self):
        log("serving: " + quote(self.argv))
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT)
        try:
            self._wait_until_healthy()
        except BaseException:  # also SIGTERM (SystemExit) or ^C while it loads
            self.__exit__()
            raise
        return self

    def _wait_until_healthy(self):
        deadline = time.time() + self.timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited {self.proc.returncode}; see "
                                   f"{self.log_path}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError(f"llama-server not healthy in {self.timeout_s} s")
            time.sleep(0.5)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *_):
        if self.proc.poll() is None:  # stopped once only: a second call finds it gone
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


# --- the run --------------------------------------------------------------------------

class Run:
    """One sitting: the configuration, the measurements so far and results.json."""

    def __init__(self, args, llama, llama_why):
        self.args, self.llama, self.llama_why = args, llama, llama_why
        os.makedirs(os.path.join(args.out, "logs"), exist_ok=True)
        os.makedirs(os.path.join(args.out, "runs"), exist_ok=True)
        self.measurements, self.commands, self.notes = [], [], []
        self.no_repack = set()  # types on which llama.cpp crashed with repacking on
        self.started = datetime.datetime.now(datetime.timezone.utc)
        self.uptime_before = uptime()
        self.commit = git_commit()  # at the start: the checkout may move during a sitting

    def path(self, *parts):
        return os.path.join(self.args.out, *parts)

    def note(self, text):
        log(text)
        self.notes.append(text)

    def add(self, m, command):
        m["load_before"] = m.get("load_before") or ""
        m["load_after"] = load_average()
        m["command"] = command
        self.commands.append(command)
        self.measurements.append(m)
        figure = {k: v for k, v in m.items() if k in ("tokens_per_s", "wall_s",
                                                          "output_tok_s", "ttft_p50_ms")}
        log(f"{m['kind']} {m['type']} {m['engine']}{' ' + m.get('config', '')}: {figure}")
        self.save()

    def save(self):
        a = self.args
        results = {
            "started": self.started.isoformat(), "uptime_before": self.uptime_before,
            "uptime_now": uptime(), "command": shown_command(a.argv),
            "machine": machine(), "folio_commit": self.commit,
            "llama_cpp": {"tools": self.llama, "not_used_because": self.llama_why,
                          "release": _llama_tools.release_tag(a.reference_dir),
                          "no_repack_types": sorted(self.no_repack)},
            "shape": a.shape, "workload": a.work, "types": a.types,
            "serving_type": a.serving_type, "threads": a.threads, "notes": self.notes,
            "measurements": self.measurements, "commands": self.commands,
            "summary": [r for r in pa.summarize(self.measurements, a.types, a.serving_type,
                                                labels(a.work),
                                                decode_aim=a.shape.get("decode_aim",
                                                                       pa.DECODE_AIM))
                        if r["kind"] in a.parts],
        }
        tmp = self.path("results.json.tmp")
        with open(tmp, "w") as f:
            json.dump(results, f, indent=2)
        os.replace(tmp, self.path("results.json"))
        return results


def in_clone(path):
    """`path` relative to the checkout when it lies inside it (the docs name no path
    outside the repository), else as it is."""
    full = os.path.abspath(path)
    return os.path.relpath(full, ROOT) if full.startswith(ROOT + os.sep) else path


def shown_command(argv):
    """The command as a user types it: ./folio bench passes --bin_dir itself; paths inside
    the checkout are shown relative to it."""
    out, skip = [], False
    for x in argv:
        if skip:
            skip = False
        elif x == "--bin_dir":
            skip = True
        elif not x.startswith("--bin_dir="):
            flag, eq, value = x.partition("=")
            out.append(f"{flag}={in_clone(value)}" if eq and flag.startswith("--") else
                       in_clone(x) if x.startswith("/") else x)
    return " ".join(["./folio", "bench", "peer"] + [quote([x]) for x in out])


def labels(w):
    """The table's names of the measurements, from the workload."""
    return {"decode": f"single-stream decode, {w['decode_tokens']} tokens (tokens/s)",
            "batched": f"{w['batch']} x ({w['prompt']} + {w['gen']}) wall time (s)",
            "serving": f"serving, {w['requests']} requests, {w['clients']} clients"}


def uptime():
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def machine():
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"model name\s*:\s*(.*)", f.read())
            cpu = m.group(1) if m else ""
    except OSError:
        pass
    return {"cpu": cpu, "cpus": os.cpu_count(), "host": platform.node()}


def git_commit():
    r = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                       capture_output=True, text=True)
    return r.stdout.strip()


def kv_bytes_per_token(shape):
    """f16 K and V of every layer: 2 x layers x kv_heads x head_dim x 2 bytes."""
    head_dim = shape.get("head_dim") or shape["dim"] // shape["heads"]
    return 2 * shape["layers"] * shape["kv_heads"] * head_dim * 2


def shape_of(path, reference_dir):
    """The shape keys of a Llama-family GGUF file, read with the reference's gguf-py."""
    sys.path.insert(0, os.path.join(reference_dir, "llama.cpp", "gguf-py"))
    import gguf  # noqa: E402 (the reference's copy)
    fields = gguf.GGUFReader(path).fields
    arch = fields["general.architecture"].contents()

    def get(key, default=None):
        f = fields.get(f"{arch}.{key}")
        return f.contents() if f is not None else default

    return {"dim": get("embedding_length"), "layers": get("block_count"),
            "heads": get("attention.head_count"), "kv_heads": get("attention.head_count_kv"),
            "head_dim": get("attention.key_length"), "context": get("context_length"),
            "name": os.path.basename(path)}


def make_models(run):
    """{type: path} of the test models, written (F16, folio-make-model) and quantized
    (llama-quantize) when missing."""
    a, s = run.args, run.args.shape
    os.makedirs(a.models_dir, exist_ok=True)
    f16 = os.path.join(a.models_dir, f"peer-{s['name']}-f16.gguf")
    if not os.path.exists(f16):
        argv = ["nice", "-n", "19", os.path.join(a.bin_dir, "folio-make-model"),
                f"--out={f16}.tmp",
                f"--dim={s['dim']}", f"--layers={s['layers']}", f"--heads={s['heads']}",
                f"--kv_heads={s['kv_heads']}", f"--hidden_dim={s['hidden_dim']}",
                f"--vocab={s['vocab']}", f"--context={s['context']}", "--dtype=f16",
                "--seed=1", f"--name=peer-{s['name']}"]
        if "experts" in s:
            argv += [f"--arch={s['arch']}", f"--head_dim={s['head_dim']}",
                     f"--experts={s['experts']}", f"--experts_used={s['experts_used']}",
                     f"--expert_hidden_dim={s['expert_hidden_dim']}"]
        log(f"writing {f16}")
        rc, out, err, _ = run_tool(argv, run.path("logs", "make-model.log"), 1800)
        if rc != 0:
            raise RuntimeError(f"folio-make-model failed ({rc}):\n{(out + err)[-2000:]}")
        os.replace(f16 + ".tmp", f16)
    paths = {"F16": f16}
    for t in a.types:
        if t == "F16":
            continue
        q = os.path.join(a.models_dir, f"peer-{s['name']}-{t.lower()}.gguf")
        if not os.path.exists(q):
            argv = ["nice", "-n", "19", run.llama["llama-quantize"], f16, q + ".tmp", t,
                    str(a.threads)]
            log(f"quantizing to {t} with llama-quantize: {q}")
            rc, out, err, _ = run_tool(argv, run.path("logs", f"quantize-{t}.log"), 1800)
            if rc != 0:
                raise RuntimeError(f"llama-quantize {t} failed ({rc}):\n{(out + err)[-2000:]}")
            os.replace(q + ".tmp", q)
        paths[t] = q
    return paths


def llama_common(run, t):
    a = run.args
    argv = ["-t", str(a.threads), "-fa", "on"]
    return argv + (["--no-repack"] if a.no_repack or t in run.no_repack else [])


def llama_decode(run, t, model, rnd):
    """One llama.cpp single-stream decode figure (llama-bench; after a crash on this type,
    llama-batched-bench -npl 1 --no-repack)."""
    a, w = run.args, run.args.work
    load = load_average()
    if t not in run.no_repack and not a.no_repack:
        argv = [run.llama["llama-bench"], "-m", model, "-t", str(a.threads), "-fa", "on",
                "-p", "0", "-n", str(w["decode_tokens"]), "-r", "1", "-o", "json"]
        rc, out, _, rss = run_tool(argv, run.path("logs", f"llama-bench-{t}-{rnd}.log"),
                                   a.tool_timeout_s)
        if rc == TIMED_OUT:
            run.note(f"llama-bench on {t} (round {rnd}) still running after "
                     f"{a.tool_timeout_s} s: stopped, no figure")
            return
        if rc == 0:
            tps = pa.llama_bench_decode_rate(pa.parse_llama_bench_json(out))
            run.add({"kind": "decode", "type": t, "engine": "llama.cpp", "round": rnd,
                     "tokens_per_s": tps, "tool": "llama-bench", "peak_rss_mib": rss,
                     "load_before": load}, quote(argv))
            return
        run.no_repack.add(t)
        run.note(f"llama-bench exited {rc} on {t} (repacking on); {t} reruns with "
                 "--no-repack (decode through llama-batched-bench -npl 1)")
    got = batched_bench(run, t, model, 1, w["decode_tokens"], 1, f"llama-decode-{t}-{rnd}")
    if got:
        row, argv, rss, load = got
        run.add({"kind": "decode", "type": t, "engine": "llama.cpp", "round": rnd,
                 "tokens_per_s": row["speed_tg"], "tool": "llama-batched-bench --no-repack",
                 "peak_rss_mib": rss, "load_before": load}, quote(argv))


def batched_bench(run, t, model, pp, tg, pl, name):
    """llama-batched-bench's row for pl sequences of pp + tg: (row, argv, peak RSS, load
    before), or None (said in the notes). A crash with repacking on reruns with
    --no-repack. Its rows go through llama.cpp's asynchronous log, which can drop the
    last lines when the process exits (seen here under load: exit 0, no row), so a cheap
    1-sequence run follows the wanted one (`-npl pl,1`: the wanted row is long written
    by then), and a missing row is rerun once."""
    a = run.args
    missing = 0
    for attempt in range(3):
        load = load_average()
        argv = [run.llama["llama-batched-bench"], "-m", model, *llama_common(run, t),
                "-tb", str(a.threads), "-c", str(pl * (pp + tg)), "-npp", str(pp),
                "-ntg", str(tg), "-npl", f"{pl},1"]
        rc, out, err, rss = run_tool(argv, run.path("logs", f"{name}-{attempt}.log"),
                                     a.tool_timeout_s)
        if rc == TIMED_OUT:
            run.note(f"{name}: llama-batched-bench still running after {a.tool_timeout_s} s: "
                     "stopped, no figure (its wall time is above that)")
            return None
        if rc == 0:
            try:
                return pa.batched_row(pa.parse_batched_bench(out + err), pp, tg, pl), argv, \
                    rss, load
            except ValueError as e:
                missing += 1
                run.note(f"{name}: {e} (exit 0){'; rerun' if missing < 2 else ''}")
                if missing >= 2:
                    return None
                continue
        if "--no-repack" in argv:
            run.note(f"{name}: llama-batched-bench exited {rc} with --no-repack; no figure")
            return None
        run.no_repack.add(t)
        run.note(f"llama-batched-bench exited {rc} on {t} (repacking on); rerun with "
                 "--no-repack")
    return None


def llama_batched(run, t, model):
    w = run.args.work
    got = batched_bench(run, t, model, w["prompt"], w["gen"], w["batch"], f"llama-batched-{t}")
    if got:
        row, argv, rss, load = got
        tool = "llama-batched-bench" + (" --no-repack" if "--no-repack" in argv else "")
        run.add({"kind": "batched", "type": t, "engine": "llama.cpp", "wall_s": row["t"],
                 "tool": tool, "peak_rss_mib": rss, "load_before": load}, quote(argv))


def folio_decode(run, cluster, t, model, rnd):
    w = run.args.work
    load = load_average()
    res = cluster.bench(["--workload=fixed", "--input_len=16",
                         f"--output_len={w['decode_tokens'] + 1}", "--num_requests=1",
                         "--max_concurrency=1", "--seed=0"],
                        run.path("runs", f"folio-decode-{t}-{rnd}.json"), echo=False)
    run.add({"kind": "decode", "type": t, "engine": "folio", "round": rnd,
             "tokens_per_s": pa.folio_decode_rate(res), "load_before": load},
            cluster.commands[-1])


def folio_batched(run, cluster, t):
    w = run.args.work
    load = load_average()
    res = cluster.bench(["--workload=fixed", f"--input_len={w['prompt']}",
                         f"--output_len={w['gen']}", f"--num_requests={w['batch']}",
                         f"--max_concurrency={w['batch']}", "--seed=0"],
                        run.path("runs", f"folio-batched-{t}.json"), echo=False)
    if res["completed"] != w["batch"]:
        run.note(f"Folio batched {t}: {res['completed']}/{w['batch']} completed")
    run.add({"kind": "batched", "type": t, "engine": "folio", "wall_s": res["duration_s"],
             "completed": res["completed"], "load_before": load}, cluster.commands[-1])


def serving_args(run, base_url, model):
    w = run.args.work
    return ["--backend=openai", f"--base_url={base_url}", f"--model_file={model}",
            "--workload=sharegpt-like", f"--num_requests={w['requests']}",
            f"--max_concurrency={w['clients']}", f"--max_input_len={w['max_input']}",
            f"--max_output_len={w['max_output']}", "--seed=0",
            f"--duration_s={run.args.tool_timeout_s}"]


def folio_serving(run, cluster, t, model):
    load = load_average()
    res, command = _cluster.run_bench(
        run.args.bin_dir, serving_args(run, cluster.http, model),
        run.path("runs", f"folio-serving-{t}.json"), echo=False)
    run.add({"kind": "serving", "type": t, "engine": "folio", "config": "Folio",
             **pa.serving_figures(res), "load_before": load}, command)


def llama_serving(run, t, model, np_slots):
    a, w = run.args, run.args.work
    slot = w["max_input"] + w["max_output"]
    for attempt in (0, 1):
        load = load_average()
        argv = [run.llama["llama-server"], "-m", model, *llama_common(run, t),
                "-tb", str(a.threads), "-c", str(np_slots * slot), "-np", str(np_slots),
                "--host", "127.0.0.1", "--port", str(_cluster.free_port())]
        config = f"-np {np_slots} -c {np_slots * slot}" + (
            " --no-repack" if "--no-repack" in argv else "")
        name = f"llama-server-{t}-np{np_slots}-{attempt}"
        try:
            with LlamaServer(argv, run.path("logs", name + ".log"),
                             a.startup_timeout_s) as server:
                res, bench_cmd = _cluster.run_bench(
                    a.bin_dir, serving_args(run, server.url, model),
                    run.path("runs", name + ".json"), echo=False)
                alive = server.proc.poll() is None
                rss = peak_rss_mib(server.proc.pid)
        except RuntimeError as e:
            res, alive, rss = None, False, None
            run.note(f"llama-server {config} on {t}: {e}")
        if res is not None and alive:
            command = quote(argv) + " &\n" + bench_cmd
            run.add({"kind": "serving", "type": t, "engine": "llama.cpp", "config": config,
                     **pa.serving_figures(res), "peak_rss_mib": rss, "load_before": load},
                    command)
            return
        if "--no-repack" in argv:
            break
        run.no_repack.add(t)
        run.note(f"llama-server {config} on {t} died; rerun with --no-repack")


def folio_memory(run, cluster, t, model):
    """The Folio worker's peak RSS against its resident bound, into the notes/results."""
    for name, svc in cluster.info.items():
        if name.startswith("worker") and isinstance(svc, dict) and "pid" in svc:
            rss = peak_rss_mib(svc["pid"])
            try:
                limit = _cluster.counters(svc["metrics"],
                                          ["folio_worker_resident_limit_bytes"])
            except OSError:
                limit = {}
            bound = limit.get("folio_worker_resident_limit_bytes")
            run.measurements.append({
                "kind": "memory", "type": t, "engine": "folio", "peak_rss_mib": rss,
                "rss_mib": peak_rss_mib(svc["pid"], "VmRSS"),
                "bound_mib": bound / 2**20 if bound else None,
                "file_mib": os.path.getsize(model) / 2**20})
            run.save()


def measure(run, models):
    a = run.args
    w = a.work
    # Folio's KV: the memory of the largest llama-server configuration (its -c), and at
    # least one full context (the scheduler's start-up check) and the batched workload.
    kv = kv_bytes_per_token(a.shape) * max(max(w["np"]) * (w["max_input"] + w["max_output"]),
                                           w["batch"] * (w["prompt"] + w["gen"]),
                                           a.shape["context"])
    if "serving" in a.parts and a.serving_type in a.types:
        run.note(f"serving on {a.serving_type}: Folio KV {kv / 2**20:.1f} MiB "
                 f"({kv // kv_bytes_per_token(a.shape)} tokens of "
                 f"{kv_bytes_per_token(a.shape)} B)")
    for t in a.types:
        if not ({"decode", "batched"} & set(a.parts)) and (a.serving_model
                                                           or t != a.serving_type):
            continue  # nothing to measure on this file
        serve = ["--model=" + models[t], f"--threads={a.threads}", f"--kv_cache_bytes={kv}",
                 "--max_num_seqs=32", "--http_port=0"] + a.serve_arg
        with _cluster.Cluster(a.bin_dir, serve, run.path("logs"), name=f"folio-{t}",
                              startup_timeout_s=a.startup_timeout_s) as cluster:
            run.commands.append(cluster.commands[0])
            if "decode" in a.parts:
                for rnd in range(a.work["rounds"]):
                    # Alternate who goes first, round by round.
                    order = ["folio", "llama"] if rnd % 2 == 0 else ["llama", "folio"]
                    for who in order:
                        if who == "folio":
                            folio_decode(run, cluster, t, models[t], rnd)
                        elif run.llama:
                            llama_decode(run, t, models[t], rnd)
            if "batched" in a.parts:
                folio_batched(run, cluster, t)
            if "batched" in a.parts and run.llama:
                llama_batched(run, t, models[t])
            if "serving" in a.parts and t == a.serving_type and not a.serving_model:
                folio_serving(run, cluster, t, models[t])
            folio_memory(run, cluster, t, models[t])
        if "serving" in a.parts and t == a.serving_type and not a.serving_model and run.llama:
            for np_slots in a.work["np"]:
                llama_serving(run, t, models[t], np_slots)
    if "serving" in a.parts and a.serving_model:
        shape = shape_of(a.serving_model, a.reference_dir)
        kv = kv_bytes_per_token(shape) * max(max(w["np"]) * (w["max_input"] + w["max_output"]),
                                             shape["context"])
        t, model = a.serving_type, os.path.abspath(a.serving_model)
        serve = ["--model=" + model, f"--threads={a.threads}", f"--kv_cache_bytes={kv}",
                 "--max_num_seqs=32", "--http_port=0"]
        run.note(f"serving on {t}: Folio KV {kv / 2**20:.1f} MiB "
                 f"({kv // kv_bytes_per_token(shape)} tokens of {kv_bytes_per_token(shape)} B)")
        with _cluster.Cluster(a.bin_dir, serve, run.path("logs"), name="folio-serving",
                              startup_timeout_s=a.startup_timeout_s) as cluster:
            run.commands.append(cluster.commands[0])
            folio_serving(run, cluster, t, model)
            folio_memory(run, cluster, t, model)
        if run.llama:
            for np_slots in a.work["np"]:
                llama_serving(run, t, model, np_slots)


def table_text(results):
    """table.md: when, where and how it ran, the one table, then the memory and the notes."""
    r, ll = results, results["llama_cpp"]
    if ll["tools"]:
        llama = f"tools in {in_clone(os.path.dirname(ll['tools']['llama-bench']))}"
    else:
        llama = f"not run: {ll['not_used_because']}"
    m = r["machine"]
    lines = [f"Measured {r['started'][:16].replace('T', ' ')} UTC, Folio {r['folio_commit']}, "
             f"llama.cpp {ll['release']} ({llama}); {m['cpu']}, {m['cpus']} CPUs, "
             f"{r['threads']} threads each.",
             f"uptime before: `{r['uptime_before']}`; after: `{r['uptime_now']}`.", "",
             "```", r["command"], "```", "", pa.format_table(r["summary"]).rstrip(), ""]
    for x in r["measurements"]:
        if x["kind"] == "memory" and x["peak_rss_mib"] and x["bound_mib"]:
            now = (f"VmRSS {x['rss_mib']:.0f} MiB at the end, "
                   f"{'within' if x['rss_mib'] <= x['bound_mib'] else 'OVER'}; "
                   if x.get("rss_mib") else "")
            lines.append(f"- Folio worker on {x['type']}: {now}peak (VmHWM) "
                         f"{x['peak_rss_mib']:.0f} MiB, "
                         f"{'within' if x['peak_rss_mib'] <= x['bound_mib'] else 'OVER'} "
                         f"(file {x['file_mib']:.0f} MiB; resident bound "
                         f"{x['bound_mib']:.0f} MiB)")
    lines += [f"- {n}" for n in r["notes"]]
    return "\n".join(lines) + "\n"


def write_docs(text):
    path = os.path.join(ROOT, "docs", "benchmarks.md")
    with open(path) as f:
        doc = pa.replace_between(f.read(), MARK_BEGIN, MARK_END, text)
    with open(path, "w") as f:
        f.write(doc)
    log(f"wrote the table into {path}")


def main(argv):
    args = parse_args(argv)
    args.argv = argv
    if args.table_from:
        with open(os.path.join(args.table_from, "results.json")) as f:
            text = table_text(json.load(f))
        return finish(args, args.table_from, text)
    if args.out is None:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        args.out = os.path.join(ROOT, "bench-results", f"peer-{'smoke-' if args.smoke else ''}{stamp}")
    llama, why = _llama_tools.find(args.llama_dir, args.reference_dir, args.llama_bin)
    may_build = not (args.smoke or args.no_build or args.llama_bin or os.environ.get("CI"))
    if llama is None and (may_build or args.build_llama) and not args.smoke:
        try:
            llama, why = _llama_tools.build(args.llama_dir, args.reference_dir), None
        except (RuntimeError, subprocess.CalledProcessError) as e:
            why = str(e)
    default_types = ["F16", "Q8_0", "Q4_K_M"]
    if args.smoke:
        default_types = ["F16", "Q8_0"] if llama else ["F16"]
    args.types = args.types.split(",") if args.types else default_types
    if llama is None and any(t != "F16" for t in args.types):
        log("no llama-quantize (llama.cpp not built): only F16 is measured")
        args.types = ["F16"]
    st = args.serving_type or (args.types[0] if args.smoke else "Q4_K_M")
    args.serving_type = None if st == "none" or st not in args.types else st
    if args.serving_model:
        args.serving_type = os.path.basename(args.serving_model)
    _cluster.check_bench(args.bin_dir)
    run = Run(args, llama, why)
    if llama is None:
        run.note(f"llama.cpp not measured: {why}; measuring Folio alone")
    models = make_models(run)
    if args.prepare:
        log(f"prepared: llama.cpp tools {'in ' + os.path.dirname(llama['llama-bench']) if llama else 'missing: ' + str(why)}; models {models}")
        return 0 if llama else 1
    rc = 0
    try:
        measure(run, models)
    except (KeyboardInterrupt, SystemExit) as e:
        rc = e.code if isinstance(e, SystemExit) and isinstance(e.code, int) else 130
        run.note("interrupted before the end: the table holds what was measured until then")
    return finish(args, args.out, table_text(run.save())) or rc


def finish(args, out, text):
    """Writes OUT/table.md (and the docs with --write_docs) and prints the table."""
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write(text)
    print(text, flush=True)
    if args.write_docs:
        write_docs(text)
    log(f"results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
