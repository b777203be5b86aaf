"""Shared by the benchmark drivers in tools/bench: a local cluster (tools/serve.py) for the
length of a `with` block, folio-bench runs, and the cachemgr's /metrics read while one runs.
Not a benchmark itself (hence the underscore)."""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_MODEL = os.path.join(os.path.dirname(ROOT), "shared", "models", "bench-28m-f16.gguf")


# A driver stopped with SIGTERM (or started in the background, where SIGINT is ignored)
# still leaves its `with Cluster(...)` block, which stops the cluster.
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def log(msg):
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def parse_prometheus(text):
    """{metric name: value} from Prometheus text; label sets of one name are summed."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "{" in line:  # label values may hold spaces
            name, rest = line[:line.index("{")], line[line.rindex("}") + 1:]
        else:
            name, _, rest = line.partition(" ")
        fields = rest.split()
        if not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        out[name] = out.get(name, 0.0) + value
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """tools/serve.py with the given flags, serving until the block ends."""

    def __init__(self, bin_dir, serve_args, startup_timeout_s=600):
        self.bin_dir = bin_dir
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="folio-bench-")
        self.info_file = os.path.join(self.dir, "info.json")
        self.argv = [sys.executable, os.path.join(ROOT, "tools", "serve.py"),
                     f"--bin_dir={bin_dir}", f"--port={self.port}", "--http_port=-1",
                     f"--info_file={self.info_file}"] + list(serve_args)
        self.timeout_s = startup_timeout_s
        self.proc = None
        self.info = None

    def __enter__(self):
        log("serving: " + " ".join(self.argv[2:]))
        self.log_file = open(os.path.join(self.dir, "serve.log"), "w")
        self.proc = subprocess.Popen(self.argv, stdout=self.log_file, stderr=subprocess.STDOUT)
        deadline = time.time() + self.timeout_s
        while not os.path.exists(self.info_file):
            if self.proc.poll() is not None or time.time() > deadline:
                self.__exit__(None, None, None)
                with open(os.path.join(self.dir, "serve.log")) as f:
                    raise RuntimeError("the cluster did not start:\n" + f.read()[-3000:])
            time.sleep(0.2)
        with open(self.info_file) as f:
            self.info = json.load(f)
        return self

    def __exit__(self, *_):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log_file.close()

    @property
    def server(self):
        return self.info["frontend"]["grpc"]

    @property
    def cachemgr_metrics(self):
        return self.info["cachemgr"]["metrics"]


def scrape(url, timeout_s=2.0):
    with urllib.request.urlopen(url, timeout=timeout_s) as r:
        return parse_prometheus(r.read().decode())


class MetricsPoller:
    """Reads `url` every `interval_s` on a thread while the block runs; `samples` is a list
    of (seconds since start, {metric: value})."""

    def __init__(self, url, interval_s=0.1):
        self.url, self.interval_s, self.samples = url, interval_s, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        start = time.time()
        while not self._stop.is_set():
            try:
                self.samples.append((time.time() - start, scrape(self.url)))
            except OSError as e:
                log(f"scrape of {self.url} failed: {e}")
            self._stop.wait(self.interval_s)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *_):
        self._stop.set()
        self._thread.join()
        try:  # one last read, after the run: the counters' final values
            self.samples.append((None, scrape(self.url)))
        except OSError as e:
            log(f"scrape of {self.url} failed: {e}")


def run_bench(bin_dir, server, args, result_json):
    """folio-bench against `server`; returns its result JSON (raises if it fails)."""
    argv = [os.path.join(bin_dir, "folio-bench"), f"--server={server}", "--progress=false",
            f"--result_json={result_json}"] + list(args)
    log("running: " + " ".join(argv[1:]))
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"folio-bench exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
    print(r.stdout, file=sys.stderr, flush=True)
    with open(result_json) as f:
        return json.load(f)
