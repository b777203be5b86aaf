#!/usr/bin/env python3
"""A clone anywhere: the repository cloned into an empty temporary folder (no ../shared
beside it) serves the embedded stories260K with the binaries already built, with no
FOLIO_MODEL or FOLIO_MODELS_DIR set, and the gRPC API returns llama2.c's golden text.

Also checks that every binary and every ./folio subcommand answers --help and --version
with exit status 0 on stdout, before any install or build step, and that a bad flag still
exits non-zero.

Usage: clone_test.py SOURCE_DIR BIN_DIR
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

SOURCE_DIR = BIN_DIR = None
BINARIES = ["folio-frontend", "folio-scheduler", "folio-cachemgr", "folio-worker", "folio-cli",
            "folio-run", "folio-make-model", "folio-cachemgr-sim", "folio-bench"]
FOLIO_COMMANDS = ["serve", "test", "build", "install", "deps", "check-thread-safety",
                  "test-sanitized", "fuzz", "bench", "reference"]


def clean_env():
    env = dict(os.environ)
    for k in ("FOLIO_MODEL", "FOLIO_MODELS_DIR"):
        env.pop(k, None)
    return env


class CloneAnywhereTest(unittest.TestCase):
    def test_clone_serves_the_golden_text(self):
        with tempfile.TemporaryDirectory() as tmp:
            clone = os.path.join(tmp, "folio")
            subprocess.run(["git", "clone", "-q", SOURCE_DIR, clone], check=True)
            self.assertFalse(os.path.exists(os.path.join(tmp, "shared")))
            self.assertTrue(os.path.exists(
                os.path.join(clone, "models", "stories260K", "stories260K.gguf")),
                "the clone carries the embedded model")
            info = os.path.join(tmp, "info.json")
            port = free_port()
            serve = subprocess.Popen(
                [sys.executable, os.path.join(clone, "tools", "serve.py"), "--bin_dir", BIN_DIR,
                 f"--port={port}", "--http_port=-1", "--threads=1", f"--info_file={info}",
                 "--kv_cache_bytes=16MiB"],
                cwd=clone, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True)
            try:
                deadline = time.time() + 120
                while not os.path.exists(info):
                    if serve.poll() is not None:
                        self.fail("serve.py exited:\n" + serve.stdout.read())
                    self.assertLess(time.time(), deadline, "cluster not serving in 120 s")
                    time.sleep(0.2)
                with open(info) as f:
                    served = json.load(f)
                self.assertEqual(served["model"], os.path.realpath(
                    os.path.join(clone, "models", "stories260K", "stories260K.gguf")))
                out = subprocess.run(
                    [os.path.join(BIN_DIR, "folio-cli"), "generate", "", "--max_tokens=200",
                     "--temperature=0", f"--server=127.0.0.1:{port}", "--json"],
                    env=clean_env(), capture_output=True, text=True, timeout=120)
                self.assertEqual(out.returncode, 0, out.stderr)
                with open(os.path.join(clone, "models", "stories260K",
                                       "expected_run_c_t0_n200.txt")) as f:
                    golden = f.read()
                # The golden file ends with the newline run.c prints after the text.
                self.assertEqual(json.loads(out.stdout)["text"], golden.rstrip("\n"))
            finally:
                serve.terminate()
                try:
                    serve.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    serve.kill()

    def test_binaries_answer_help_and_version_with_zero(self):
        for b in BINARIES:
            path = os.path.join(BIN_DIR, b)
            for flag in ("--help", "--version"):
                r = subprocess.run([path, flag], capture_output=True, text=True, timeout=30)
                self.assertEqual(r.returncode, 0, f"{b} {flag}: {r.stderr}")
                self.assertTrue(r.stdout.strip(), f"{b} {flag} printed nothing on stdout")
            r = subprocess.run([path, "--no_such_flag_at_all"], capture_output=True, text=True,
                               timeout=30)
            self.assertNotEqual(r.returncode, 0, f"{b} accepted an unknown flag")

    def test_folio_commands_answer_help_before_building(self):
        # In an empty clone with no build folder: --help must not install or build anything.
        with tempfile.TemporaryDirectory() as tmp:
            clone = os.path.join(tmp, "folio")
            subprocess.run(["git", "clone", "-q", SOURCE_DIR, clone], check=True)
            folio = os.path.join(clone, "folio")
            for args in [["--help"], ["--version"], ["help"]] + [[c, "--help"] for c in FOLIO_COMMANDS]:
                r = subprocess.run([folio] + args, capture_output=True, text=True, timeout=60,
                                   env=clean_env())
                self.assertEqual(r.returncode, 0, f"./folio {' '.join(args)}: {r.stderr}")
                self.assertTrue(r.stdout.strip(), f"./folio {' '.join(args)} printed nothing")
            self.assertFalse(os.path.exists(os.path.join(clone, "build")),
                             "--help started a build")
            r = subprocess.run([folio, "no-such-command"], capture_output=True, text=True,
                               timeout=60)
            self.assertNotEqual(r.returncode, 0)


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    SOURCE_DIR, BIN_DIR = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1], verbosity=2)
