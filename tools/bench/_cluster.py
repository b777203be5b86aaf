"""Shared by the benchmark drivers in tools/bench (paper.py, sharing.py, prefix.py, peer.py):
a local cluster (tools/serve.py) for the length of a `with` block, and folio-bench runs against it.
Server metrics over a run come from folio-bench's own scraping (--metrics_url, the JSON's
"server_metrics"); `counters` reads a few counters once, before and after a run.
Not a benchmark itself (hence the underscore)."""

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_BIN_DIR = os.path.join(ROOT, "build", "bin")
MODEL_NAME = "bench-28m-f16.gguf"


# A driver stopped with SIGTERM (or started in the background, where SIGINT is ignored)
# still leaves its `with Cluster(...)` block, which stops the cluster.
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def log(msg):
    name = os.path.splitext(os.path.basename(sys.argv[0] or "bench"))[0]
    print(f"[{name}] {msg}", file=sys.stderr, flush=True)


def default_model(name=MODEL_NAME):
    """$FOLIO_MODELS_DIR/name, else ../shared/models/name beside the checkout; None if
    neither exists."""
    dirs = [os.environ["FOLIO_MODELS_DIR"]] if os.environ.get("FOLIO_MODELS_DIR") else []
    dirs.append(os.path.join(ROOT, "..", "shared", "models"))
    for d in dirs:
        path = os.path.join(d, name)
        if os.path.exists(path):
            return os.path.abspath(path)
    return None


def add_cluster_args(parser):
    """--model, --bin_dir and --threads, the flags every driver's cluster takes."""
    parser.add_argument("--model", default=None,
                        help=f"GGUF file (default: $FOLIO_MODELS_DIR/{MODEL_NAME}, else "
                             f"../shared/models/{MODEL_NAME})")
    parser.add_argument("--bin_dir", default=DEFAULT_BIN_DIR)
    parser.add_argument("--threads", type=int, default=2)


def find_model(args):
    """Sets args.model to the default model when none was given; False (after saying why)
    when there is no such file."""
    args.model = args.model or default_model()
    if args.model and os.path.exists(args.model):
        return True
    log(f"no model at {args.model}: pass --model=FILE, or set FOLIO_MODELS_DIR to a folder "
        f"holding {MODEL_NAME}" if args.model else
        f"no model: pass --model=FILE, or set FOLIO_MODELS_DIR to a folder holding {MODEL_NAME}")
    return False


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def quote(argv):
    return " ".join(shlex.quote(a) for a in argv)


def check_bench(bin_dir):
    """Raises RuntimeError unless bin_dir holds a folio-bench that can scrape /metrics."""
    bench = os.path.join(bin_dir, "folio-bench")
    if not os.path.exists(bench):
        raise RuntimeError(f"{bench} is not built; run ./folio build")
    r = subprocess.run([bench, "--helpfull"], capture_output=True, text=True)
    if "metrics_url" not in r.stdout + r.stderr:
        raise RuntimeError(f"{bench} has no --metrics_url (it cannot scrape /metrics); "
                           "rebuild it")


class Cluster:
    """tools/serve.py with the given flags, serving until the block ends (or stop()).

    Its output goes to RUN_DIR/NAME.serve.log; it writes its endpoints to
    RUN_DIR/NAME.info.json (`info`). A cluster that exits or does not come up within
    startup_timeout_s raises RuntimeError with the log's tail. `commands` lists the
    commands run: tools/serve.py's, then each folio-bench run's."""

    def __init__(self, bin_dir, serve_args, run_dir=None, name="serve",
                 startup_timeout_s=300):
        self.bin_dir = bin_dir
        self.run_dir = run_dir or tempfile.mkdtemp(prefix="folio-bench-")
        self.info_file = os.path.join(self.run_dir, f"{name}.info.json")
        self.log_path = os.path.join(self.run_dir, f"{name}.serve.log")
        # Port 0: the frontend binds a free port itself and the info file says which. (A
        # port probed free here could be taken by a service's own ephemeral port before the
        # frontend binds it.)
        self.argv = [sys.executable, os.path.join(ROOT, "tools", "serve.py"),
                     f"--bin_dir={bin_dir}", "--port=0", "--http_port=-1",
                     f"--info_file={self.info_file}"] + list(serve_args)
        self.timeout_s = startup_timeout_s
        self.commands = [quote(self.argv)]
        self.proc = None
        self.log_file = None
        self.info = None

    def __enter__(self):
        log("serving: " + quote(self.argv[2:]))
        if os.path.exists(self.info_file):
            os.remove(self.info_file)  # an earlier run's: its ports are not ours
        self.log_file = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.argv, stdout=self.log_file, stderr=subprocess.STDOUT)
        try:
            self._wait_until_up()
        except BaseException:  # also SIGTERM (SystemExit) or ^C while it starts
            self.stop()
            raise
        return self

    def _wait_until_up(self):
        deadline = time.time() + self.timeout_s
        while not os.path.exists(self.info_file):
            if self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"the cluster did not start (exit {self.proc.returncode}); "
                                   f"see {self.log_path}:\n{self.tail()}")
            if time.time() > deadline:
                self.stop()
                raise RuntimeError(f"the cluster did not start within {self.timeout_s} s; "
                                   f"see {self.log_path}:\n{self.tail()}")
            time.sleep(0.2)
        with open(self.info_file) as f:
            self.info = json.load(f)

    def __exit__(self, *_):
        self.stop()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.log_file:
            self.log_file.close()

    def tail(self, lines=30):
        try:
            with open(self.log_path) as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    @property
    def server(self):
        return self.info["frontend"]["grpc"]

    @property
    def http(self):
        """The frontend's OpenAI-style HTTP base URL (serve_args with --http_port=0)."""
        return self.info["frontend"]["http"]

    @property
    def cachemgr_metrics(self):
        return self.info["cachemgr"]["metrics"]

    def bench(self, args, result_json, echo=True):
        """folio-bench against this cluster's gRPC API (run_bench); returns its result JSON
        and records the command in `commands`. A failure's message carries the cluster
        log's tail too."""
        try:
            result, command = run_bench(self.bin_dir, [f"--server={self.server}"] + list(args),
                                        result_json, echo)
        except RuntimeError as e:
            raise RuntimeError(f"{e}\ncluster log tail ({self.log_path}):\n{self.tail()}")
        self.commands.append(command)
        return result


def run_bench(bin_dir, args, result_json, echo=True):
    """folio-bench with `args` (any target: a cluster, or another OpenAI-style server);
    returns (its result JSON, the command). Raises RuntimeError (with folio-bench's output)
    if it fails. With echo, its report goes to stderr."""
    argv = [os.path.join(bin_dir, "folio-bench"), "--progress=false",
            f"--result_json={result_json}"] + list(args)
    log("running: " + quote(argv[1:]))
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"folio-bench exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
    if echo:
        print(r.stdout, file=sys.stderr, flush=True)
    with open(result_json) as f:
        return json.load(f), quote(argv)


def metrics_args(url, interval_ms, gauges=None):
    """folio-bench's flags to scrape `url` every interval_ms, keeping `gauges` (default:
    folio-bench's own list)."""
    argv = [f"--metrics_url={url}", f"--metrics_interval_ms={interval_ms}"]
    return argv + (["--metrics_gauges=" + ",".join(gauges)] if gauges else [])


def series(result):
    """The scrapes of a folio-bench result: [{t_s, in_flight, gauge: value}], or []."""
    return (result.get("server_metrics") or {}).get("series") or []


def counters(url, names, timeout_s=5.0, sum_labels=False):
    """{name: value} of the samples `names` on the Prometheus page at `url` (one GET), as
    counter_values reads them; a name the page lacks is left out."""
    with urllib.request.urlopen(url, timeout=timeout_s) as r:
        return counter_values(r.read().decode(), names, sum_labels)


def counter_values(text, names, sum_labels=False):
    """{name: value} of the unlabelled samples `names`; with sum_labels, each name's
    labelled samples summed instead (a family such as one by proposer)."""
    out = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 2 or line.startswith("#"):
            continue
        name = fields[0].split("{", 1)[0] if sum_labels else fields[0]
        if name in names:
            out[name] = out.get(name, 0.0) + float(fields[-1])
    return out
