"""Shared by the smoke tests of the benchmark drivers (paper_smoke_test.py,
peer_smoke_test.py, run by ctest): their command line, one driver run with its output
kept, and the list of checks that fail the test. Not a test itself (hence the
underscore)."""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_args(description):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--bin_dir", required=True, help="Folio's build/bin")
    return p.parse_args()


def stories_model():
    """$FOLIO_MODELS_DIR's stories260K, else the one embedded in the repository; None if
    neither exists (said on stdout)."""
    models = os.environ.get("FOLIO_MODELS_DIR") or os.path.join(HERE, "..", "..", "models")
    model = os.path.join(models, "stories260K", "stories260K.gguf")
    if os.path.exists(model):
        return model
    print(f"no model at {model}")
    return None


def run_driver(script, args, timeout_s):
    """Runs tools/bench/SCRIPT with args under this Python; its stderr is echoed (ctest
    shows it on failure). Returns (exit code, stdout)."""
    argv = [sys.executable, os.path.join(HERE, script)] + list(args)
    print("$ " + " ".join(argv), flush=True)
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    sys.stderr.write(r.stderr)
    if r.returncode != 0:
        print(f"FAIL: {script} exited {r.returncode}")
    return r.returncode, r.stdout


class Checks:
    """Collects failed checks; finish() prints them (or the OK line) and gives the exit
    code."""

    def __init__(self):
        self.failures = []

    def __call__(self, cond, what):
        if not cond:
            self.failures.append(what)
        return cond

    def finish(self, ok_line):
        for f in self.failures:
            print(f"FAIL: {f}")
        if not self.failures:
            print("OK: " + ok_line)
        return 1 if self.failures else 0
