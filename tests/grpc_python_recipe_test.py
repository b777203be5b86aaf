#!/usr/bin/env python3
"""docs/quickstart.md's Python gRPC recipe, run as written against a real local cluster
(stories260K through tools/serve.py): the shell block between the python-grpc markers is
extracted, its port 50051 replaced by the cluster's and its stub folder by a temporary
one, and run with bash from the repository root; it must stream text and end with the
usage line.

  grpc_python_recipe_test.py --bin_dir build/bin

Exits 0 when it works, 1 otherwise, 77 (a skip for ctest) without the model, protoc's
Python plugin or python3-grpcio.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIP = 77



def recipe():
    with open(os.path.join(ROOT, "docs", "quickstart.md")) as f:
        text = f.read()
    m = re.search(r"<!-- python-grpc:begin -->\s*```sh\n(.*?)```\s*<!-- python-grpc:end -->",
                  text, re.S)
    if not m:
        raise SystemExit("docs/quickstart.md has no python-grpc block")
    return m.group(1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin_dir", required=True)
    args = p.parse_args()
    models = os.environ.get("FOLIO_MODELS_DIR") or os.path.join(ROOT, "models")
    model = os.path.join(models, "stories260K", "stories260K.gguf")
    if not os.path.exists(model):
        print(f"SKIP: no stories260K at {model}")
        return SKIP
    if not os.path.exists("/usr/bin/grpc_python_plugin") or not shutil.which("protoc"):
        print("SKIP: protoc or /usr/bin/grpc_python_plugin (protobuf-compiler-grpc) is missing")
        return SKIP
    if subprocess.run(["/usr/bin/python3", "-c", "import grpc"]).returncode != 0:
        print("SKIP: /usr/bin/python3 has no grpc module (python3-grpcio)")
        return SKIP

    block = recipe()
    if "127.0.0.1:50051" not in block or "/tmp/folio-py" not in block:
        print("FAIL: the recipe names neither 127.0.0.1:50051 nor /tmp/folio-py")
        return 1
    stubs = tempfile.mkdtemp(prefix="folio-py-")
    run = tempfile.mkdtemp(prefix="folio-recipe-test-")
    info = os.path.join(run, "info.json")
    serve = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "tools", "serve.py"), f"--bin_dir={args.bin_dir}",
         f"--model={model}", "--port=0", "--http_port=-1", "--kv_cache_bytes=16MiB",
         "--threads=1", f"--info_file={info}"],
        stdout=subprocess.DEVNULL, stderr=open(os.path.join(run, "serve.log"), "w"))
    try:
        deadline = time.time() + 120
        while not os.path.exists(info) and serve.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        if not os.path.exists(info):
            print("FAIL: the cluster did not start; see " + os.path.join(run, "serve.log"))
            return 1
        with open(info) as f:
            server = json.load(f)["frontend"]["grpc"]  # --port=0: the port it bound
        script = block.replace("127.0.0.1:50051", server).replace("/tmp/folio-py", stubs)
        r = subprocess.run(["bash", "-e", "-c", script], cwd=ROOT, capture_output=True,
                           text=True, timeout=120)
        print(r.stdout)
        if r.returncode != 0:
            print(f"FAIL: the recipe exited {r.returncode}:\n{r.stderr}")
            return 1
        m = re.search(r"\[(\d+) tokens\]\s*$", r.stdout)
        if not m or int(m.group(1)) != 40 or len(r.stdout) < 60:
            print("FAIL: expected streamed text ending with '[40 tokens]'")
            return 1
        print("ok: the quickstart's Python recipe streams a completion")
        return 0
    finally:
        serve.terminate()
        try:
            serve.wait(timeout=30)
        except subprocess.TimeoutExpired:
            serve.kill()
        shutil.rmtree(stubs, ignore_errors=True)
        shutil.rmtree(run, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
