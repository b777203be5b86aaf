#!/usr/bin/env python3
"""./folio serve's supervisor on a real local cluster (stories260K): SIGKILL the worker,
then the cache manager; each is started again with the same ports and a line saying so,
and the cluster serves again (the scheduler heals the replica, services/scheduler/
recovery.h). Also checks the backoff schedule.

  serve_supervisor_test.py --bin_dir build/bin

Exits 0 when every check passes, 1 otherwise, 77 (a skip for ctest) without the model.
"""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import shutil
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import serve  # noqa: E402  (restart_delay)

SKIP = 77
failures = []


def expect(ok, message):
    if not ok:
        failures.append(message)
        print(f"FAIL: {message}", flush=True)
    return ok



def read_info(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def generate(cli, server, timeout_s):
    r = subprocess.run([cli, "generate", "Once upon a time", "--max_tokens=8",
                        f"--server={server}"], capture_output=True, text=True,
                       timeout=timeout_s)
    return r.returncode == 0, r.stdout + r.stderr


def pid_alive(pid):
    """True while `pid` runs (a zombie, reaped by init soon, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin_dir", required=True)
    args = p.parse_args()

    expect([serve.restart_delay(k) for k in range(8)] == [0.5, 1, 2, 4, 8, 16, 30, 30],
           "restart backoff doubles from 0.5 s to at most 30 s")

    # $FOLIO_MODELS_DIR's copy of stories260K, else the one embedded in the repository.
    models = os.environ.get("FOLIO_MODELS_DIR") or os.path.join(ROOT, "models")
    model = os.path.join(models, "stories260K", "stories260K.gguf")
    if not os.path.exists(model):
        print(f"SKIP: no stories260K at {model}")
        return SKIP
    # A taken HTTP port is refused before anything starts (the model is not loaded, no
    # run folder is made), naming the port; bounded loosely.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        started = time.time()
        r = subprocess.run(
            [sys.executable, os.path.join(ROOT, "tools", "serve.py"), f"--bin_dir={args.bin_dir}",
             f"--model={model}", "--port=0", f"--http_port={busy}"],
            capture_output=True, text=True, timeout=60)
        took = time.time() - started
    expect(r.returncode == 1, f"a taken --http_port: exit {r.returncode}, not 1: {r.stderr}")
    expect(took < 5, f"a taken --http_port took {took:.1f} s to refuse")
    expect(f"port {busy}" in r.stderr and "in use" in r.stderr,
           f"the refusal does not name port {busy}: {r.stderr}")
    expect("logs in" not in r.stderr, f"a refused start made a run folder: {r.stderr}")

    cli = os.path.join(args.bin_dir, "folio-cli")
    run = tempfile.mkdtemp(prefix="folio-supervisor-test-")
    info_file = os.path.join(run, "info.json")
    stderr_path = os.path.join(run, "serve.stderr")
    with open(stderr_path, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, os.path.join(ROOT, "tools", "serve.py"), f"--bin_dir={args.bin_dir}",
             f"--model={model}", "--port=0", "--http_port=-1", "--kv_cache_bytes=16MiB",
             "--threads=1", f"--info_file={info_file}"],
            stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.time() + 120
        while read_info(info_file) is None and time.time() < deadline and proc.poll() is None:
            time.sleep(0.1)
        info = read_info(info_file)
        if not expect(info is not None, "the cluster did not start"):
            return 1
        server = info["frontend"]["grpc"]  # --port=0: the port it bound
        ok, out = generate(cli, server, 60)
        expect(ok, f"the cluster serves before any kill: {out}")

        for name in ["worker", "cachemgr"]:
            old_pid = info[name]["pid"]
            old_grpc = info[name]["grpc"]
            os.kill(old_pid, signal.SIGKILL)
            killed = time.time()
            while time.time() < killed + 20:
                info = read_info(info_file) or info
                if info[name]["pid"] != old_pid:
                    break
                time.sleep(0.1)
            expect(info[name]["pid"] != old_pid, f"{name} was not restarted within 20 s")
            expect(info[name]["grpc"] == old_grpc, f"{name} came back on another port")
            served = False
            while time.time() < killed + 30 and not served:
                served, out = generate(cli, server, 30)
            expect(served, f"the cluster serves again after {name} was killed: {out}")
            expect(proc.poll() is None, f"./folio serve exited after {name} was killed")
        with open(stderr_path) as f:
            log = f.read()
        for name in ["worker", "cachemgr"]:
            expect(f"{name} exited with code -9; restarting it in 0.5 s" in log,
                   f"no restart line for {name} in:\n{log}")
            expect(f"{name} restarted (pid" in log, f"no 'restarted' line for {name}")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    expect(proc.returncode == 0, f"./folio serve exited {proc.returncode} on SIGTERM")
    if info is not None:
        expect(not os.path.exists(info["run_dir"]),
               f"a clean stop leaves its run folder behind: {info['run_dir']}")

    # serve.py SIGKILLed (no chance to stop anything): its services die with it, so the
    # ports are free again; bounded loosely.
    info_file2 = os.path.join(run, "info2.json")
    proc2 = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "tools", "serve.py"), f"--bin_dir={args.bin_dir}",
         f"--model={model}", "--port=0", "--http_port=-1", "--kv_cache_bytes=16MiB",
         "--threads=1", f"--info_file={info_file2}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while read_info(info_file2) is None and time.time() < deadline and proc2.poll() is None:
        time.sleep(0.1)
    info2 = read_info(info_file2)
    if expect(info2 is not None, "the second cluster did not start"):
        pids = [info2[n]["pid"] for n in ("frontend", "scheduler", "cachemgr", "worker")]
        proc2.kill()
        proc2.wait()
        killed = time.time()
        alive = pids
        while alive and time.time() < killed + 10:
            alive = [p for p in pids if pid_alive(p)]
            time.sleep(0.1)
        expect(not alive, f"services outlived their SIGKILLed supervisor: {alive}")
        shutil.rmtree(info2["run_dir"], ignore_errors=True)
    if not failures:
        shutil.rmtree(run, ignore_errors=True)
    print("OK" if not failures else f"{len(failures)} failures (logs in {run})")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
