"""A local Folio cluster (tools/serve.py) for the HTTP tests and benchmarks in Python.

    with LocalCluster(bin_dir, ["--max_num_seqs=8"]) as c:
        c.http_port, c.frontend_pid ...

Starts the cluster with free ports and an info file, waits until it serves, and stops it
(SIGTERM, as Ctrl-C does) on exit. The model: $FOLIO_MODELS_DIR's stories260K, else the
embedded models/stories260K.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def stories260k():
    """$FOLIO_MODELS_DIR's stories260K, else the one embedded in the repository (models/)."""
    models = os.environ.get("FOLIO_MODELS_DIR") or os.path.join(ROOT, "models")
    path = os.path.join(models, "stories260K", "stories260K.gguf")
    if not os.path.exists(path):
        print(f"no model at {path} (set FOLIO_MODELS_DIR or restore models/stories260K)")
        sys.exit(1)
    return path


class LocalCluster:
    def __init__(self, bin_dir, extra_args=(), model=None, timeout_s=120):
        self.bin_dir = bin_dir
        self.args = list(extra_args)
        self.model = model or stories260k()
        self.timeout_s = timeout_s
        self.proc = None
        self.info = None

    def __enter__(self):
        fd, self.info_file = tempfile.mkstemp(prefix="folio-info-", suffix=".json")
        os.close(fd)
        os.unlink(self.info_file)
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(ROOT, "tools", "serve.py"), "--bin_dir", self.bin_dir,
             "--model", self.model, "--port=0", "--http_port=0", "--info_file", self.info_file]
            + self.args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + self.timeout_s
        while not os.path.exists(self.info_file):
            if self.proc.poll() is not None or time.time() > deadline:
                self.log.seek(0)
                self.__exit__()
                raise RuntimeError("the cluster did not start:\n" + self.log.read().decode(errors="replace"))
            time.sleep(0.1)
        with open(self.info_file) as f:
            self.info = json.load(f)
        return self

    @property
    def http_url(self):
        return self.info["frontend"]["http"]

    @property
    def http_port(self):
        return int(self.http_url.rsplit(":", 1)[1])

    def frontend_pid(self):
        """The folio-frontend process (a child of serve.py)."""
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid), "-f", "folio-frontend"],
                             capture_output=True, text=True).stdout.split()
        return int(out[0]) if out else None

    def __exit__(self, *exc):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if os.path.exists(self.info_file):
            os.unlink(self.info_file)
        return False
