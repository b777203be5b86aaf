#!/usr/bin/env python3
"""Checks deploy/k8s against the binaries: every overlay renders with `kubectl kustomize`,
every container's command line passes the binary's --check_flags, and the ports, probes,
shutdown timings, Services and monitors in the manifests agree with the flags.

  k8s_manifests_test.py --bin_dir build/bin [--kubectl kubectl]

Exits 0 when every check passes, 1 otherwise, and 77 (a skip for ctest) when kubectl or
Python's yaml module is missing.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

SKIP = 77
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
K8S = os.path.join(ROOT, "deploy", "k8s")
OVERLAYS = ["cpu-demo", "gpu-tp2", "cpu-demo-tls", "cpu-demo-scale-out"]
# The grpc.health.v1 name each binary reports (ServerOptions.service_name in its main.cc).
HEALTH_NAMES = {
    "folio-frontend": "folio.v1.TextGeneration",
    "folio-scheduler": "folio.internal.v1.Scheduler",
    "folio-cachemgr": "folio.internal.v1.CacheManager",
    "folio-worker": "folio.internal.v1.Worker",
}

# Binaries whose liveness is a health name of its own (the scheduler: step-loop progress,
# services/scheduler/stall_watchdog.h), apart from readiness.
LIVENESS_NAMES = {"folio-scheduler": "liveness"}

try:
    import yaml
except ImportError:
    print("SKIP: Python's yaml module is missing (Debian package python3-yaml)")
    sys.exit(SKIP)


class Checker:
    def __init__(self, overlay):
        self.overlay = overlay
        self.failures = []
        self.checks = 0

    def expect(self, ok, message):
        self.checks += 1
        if not ok:
            self.failures.append(f"[{self.overlay}] {message}")
        return ok


def expand(value, env):
    """Kubernetes' $(VAR) expansion; an unknown name is left as it is (and then fails)."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: env.get(m.group(1), m.group(0)), value)


def container_env(c, config_maps, chk, where):
    env = {}
    for source in c.get("envFrom", []):
        name = source.get("configMapRef", {}).get("name")
        if chk.expect(name in config_maps, f"{where}: envFrom names ConfigMap {name}, not rendered"):
            env.update(config_maps[name])
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = expand(e["value"], env)
        elif "configMapKeyRef" in e.get("valueFrom", {}):
            ref = e["valueFrom"]["configMapKeyRef"]
            data = config_maps.get(ref["name"], {})
            if chk.expect(ref["key"] in data, f"{where}: env {e['name']} names a missing key"):
                env[e["name"]] = data[ref["key"]]
    return env


def parse_flags(args):
    flags = {}
    for a in args:
        m = re.fullmatch(r"--([a-z_0-9]+)(?:=(.*))?", a)
        if m:
            flags[m.group(1)] = m.group(2) if m.group(2) is not None else "true"
    return flags


def prestop_seconds(c):
    command = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
    if len(command) == 2 and command[0] == "sleep" and command[1].isdigit():
        return int(command[1])
    sleep = c.get("lifecycle", {}).get("preStop", {}).get("sleep", {})
    return sleep.get("seconds")


def check_container(c, pod_spec, config_maps, bin_dir, chk, where):
    """Returns (binary, flags) for a Folio container."""
    env = container_env(c, config_maps, chk, where)
    command = [expand(x, env) for x in c.get("command", [])]
    args = [expand(x, env) for x in c.get("args", [])]
    if not chk.expect(len(command) == 1, f"{where}: command should be the binary alone"):
        return None, {}
    binary = os.path.basename(command[0])
    if not chk.expect(binary in HEALTH_NAMES, f"{where}: {binary} is not a Folio service"):
        return None, {}
    for a in args:
        chk.expect("$(" not in a, f"{where}: {a} refers to a variable no env provides")
    path = os.path.join(bin_dir, binary)
    if chk.expect(os.access(path, os.X_OK), f"{where}: {path} is not built"):
        r = subprocess.run([path, "--check_flags", *args], capture_output=True, text=True,
                           timeout=60)
        chk.expect(r.returncode == 0,
                   f"{where}: {binary} --check_flags {' '.join(args)} exited {r.returncode}:\n"
                   f"{r.stderr.strip()}")
    flags = parse_flags(args)
    for required in ["host", "port", "metrics_port", "shutdown_grace_ms", "drain_timeout_ms"]:
        chk.expect(required in flags, f"{where}: --{required} must be set explicitly")
    chk.expect(flags.get("host") == "0.0.0.0",
               f"{where}: --host must be 0.0.0.0 (probes and scrapes reach the pod IP)")
    port, metrics_port = int(flags.get("port", -1)), int(flags.get("metrics_port", -1))
    chk.expect(port > 0 and metrics_port > 0, f"{where}: --port and --metrics_port must be fixed")

    # Ports: *grpc <-> --port, *metrics <-> --metrics_port.
    named = {p.get("name", ""): p["containerPort"] for p in c.get("ports", [])}
    grpc_ports = [v for k, v in named.items() if k.endswith("grpc")]
    metric_ports = [v for k, v in named.items() if k.endswith("metrics")]
    chk.expect(grpc_ports == [port], f"{where}: grpc containerPort {grpc_ports} != --port={port}")
    chk.expect(metric_ports == [metrics_port],
               f"{where}: metrics containerPort {metric_ports} != --metrics_port={metrics_port}")

    # TLS (components/tls): the files the flags name come from a mounted Secret.
    tls_flags = {k: v for k, v in flags.items() if k in ("tls_cert", "tls_key", "tls_ca",
                                                           "http_tls_cert", "http_tls_key", "http_tls_ca")}
    mounts = {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])}
    secrets = {v["name"] for v in pod_spec.get("volumes", []) if "secret" in v}
    for flag, path in tls_flags.items():
        chk.expect(any(n in secrets and path.startswith(mp.rstrip("/") + "/") for n, mp in mounts.items()),
                   f"{where}: --{flag}={path} is not in a mounted Secret")
    if tls_flags:
        chk.expect(pod_spec.get("securityContext", {}).get("fsGroup") == pod_spec.get(
            "securityContext", {}).get("runAsGroup"),
                   f"{where}: the Secret's files must be readable by the pod's group (fsGroup)")

    # Probes against grpc.health.v1 on --port: native gRPC probes, or (with TLS, which
    # those cannot speak) `folio-cli health` with the container's own --tls_* flags.
    cli_tls = [f"--{k}={v}" for k, v in flags.items() if k in ("tls_cert", "tls_key", "tls_ca")]
    for kind in ["startupProbe", "readinessProbe", "livenessProbe"]:
        probe = c.get(kind)
        if probe is not None and "exec" in probe:
            cmd = probe["exec"].get("command", [])
            ok = (chk.expect(len(cmd) > 2 and os.path.basename(cmd[0]) == "folio-cli" and cmd[1] == "health",
                             f"{where}: {kind} exec is not folio-cli health")
                  and chk.expect(f"--server=127.0.0.1:{port}" in cmd,
                                 f"{where}: {kind} does not check --port={port}"))
            chk.expect(all(t in cmd for t in cli_tls) and bool(cli_tls),
                       f"{where}: {kind} runs folio-cli without the container's TLS flags")
            cli = os.path.join(bin_dir, "folio-cli")
            if ok and os.access(cli, os.X_OK):
                r = subprocess.run([cli, "--check_flags", *cmd[1:]], capture_output=True, text=True,
                                   timeout=60)
                chk.expect(r.returncode == 0, f"{where}: {kind}: folio-cli --check_flags failed: {r.stderr}")
            service = next((a.split("=", 1)[1] for a in cmd if a.startswith("--service=")), None)
            chk.expect(service in (None, "", HEALTH_NAMES[binary]),
                       f"{where}: {kind} asks health of {service}, {binary} reports {HEALTH_NAMES[binary]}")
            continue
        if not chk.expect(probe is not None and "grpc" in probe, f"{where}: no gRPC {kind}"):
            continue
        chk.expect(not cli_tls, f"{where}: {kind} is a native gRPC probe, which cannot speak TLS")
        chk.expect(probe["grpc"].get("port") == port,
                   f"{where}: {kind} port {probe['grpc'].get('port')} != --port={port}")
        service = probe["grpc"].get("service")
        if kind == "livenessProbe" and binary in LIVENESS_NAMES:
            chk.expect(service == LIVENESS_NAMES[binary],
                       f"{where}: livenessProbe asks health of {service}; {binary} reports "
                       f"its progress as {LIVENESS_NAMES[binary]!r} (its own name drops "
                       f"during a recovery, which must not restart it)")
            continue
        chk.expect(service in (None, "", HEALTH_NAMES[binary]),
                   f"{where}: {kind} asks health of {service}, {binary} reports "
                   f"{HEALTH_NAMES[binary]}")

    if binary == "folio-scheduler":
        # A step may take up to --worker_timeout_ms; only a loop stuck past that is stalled.
        stall_ms = int(flags.get("stall_timeout_s", 180)) * 1000
        worker_ms = int(flags.get("worker_timeout_ms", 60000))
        chk.expect(stall_ms > worker_ms,
                   f"{where}: --stall_timeout_s ({stall_ms} ms) must exceed --worker_timeout_ms "
                   f"({worker_ms} ms), or a slow step restarts the scheduler")

    # Shutdown: preStop, then --shutdown_grace_ms, then --drain_timeout_ms, all inside the
    # pod's grace period.
    pre = prestop_seconds(c)
    grace = pod_spec.get("terminationGracePeriodSeconds", 30)
    if chk.expect(pre is not None, f"{where}: no preStop sleep"):
        total = pre + (int(flags.get("shutdown_grace_ms", 500)) +
                       int(flags.get("drain_timeout_ms", 10000))) / 1000
        chk.expect(total <= grace,
                   f"{where}: preStop {pre}s + grace + drain = {total}s exceeds "
                   f"terminationGracePeriodSeconds={grace}")

    sc = c.get("securityContext", {})
    chk.expect(sc.get("readOnlyRootFilesystem") is True, f"{where}: root filesystem not read-only")
    chk.expect(sc.get("allowPrivilegeEscalation") is False, f"{where}: privilege escalation allowed")
    res = c.get("resources", {})
    chk.expect({"cpu", "memory"} <= set(res.get("requests", {})), f"{where}: no cpu/memory requests")
    chk.expect("memory" in res.get("limits", {}), f"{where}: no memory limit")
    return binary, flags


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def check_overlay(overlay, kubectl, bin_dir, rules):
    chk = Checker(overlay)
    r = subprocess.run([kubectl, "kustomize", os.path.join(K8S, "overlays", overlay)],
                       capture_output=True, text=True)
    if not chk.expect(r.returncode == 0, f"kubectl kustomize failed:\n{r.stderr}"):
        return chk
    objs = [o for o in yaml.safe_load_all(r.stdout) if o]
    by_kind = {}
    for o in objs:
        by_kind.setdefault(o["kind"], []).append(o)
    config_maps = {o["metadata"]["name"]: o.get("data", {}) for o in by_kind.get("ConfigMap", [])}

    pods = []  # (workload name, pod labels, containers with binary and flags)
    for w in by_kind.get("Deployment", []) + by_kind.get("StatefulSet", []):
        name = w["metadata"]["name"]
        spec = w["spec"]["template"]["spec"]
        labels = w["spec"]["template"]["metadata"].get("labels", {})
        chk.expect(selects(w["spec"]["selector"]["matchLabels"], labels),
                   f"{name}: selector does not match its pod template")
        # A dead container is restarted in place (same pod, same ports), which is what the
        # scheduler's recovery waits for (services/scheduler/recovery.h).
        chk.expect(spec.get("restartPolicy", "Always") == "Always",
                   f"{name}: restartPolicy must be Always (a dead worker or cache manager "
                   f"comes back in place)")
        psc = spec.get("securityContext", {})
        chk.expect(psc.get("runAsNonRoot") is True and psc.get("runAsUser", 0) != 0,
                   f"{name}: pods must run as a non-root user")
        containers = []
        for c in spec["containers"]:
            binary, flags = check_container(c, spec, config_maps, bin_dir, chk,
                                            f"{name}/{c['name']}")
            containers.append((c, binary, flags))
        pods.append((name, labels, containers))

        # Inside a replica pod: the scheduler's addresses are its siblings' ports, and the
        # siblings outlive the scheduler's drain.
        sched = [(c, f) for c, b, f in containers if b == "folio-scheduler"]
        if sched:
            sc, sf = sched[0]
            cache = [f for c, b, f in containers if b == "folio-cachemgr"]
            workers = [(c["name"], f) for c, b, f in containers if b == "folio-worker"]
            chk.expect(len(cache) == 1 and sf.get("cachemgr") == f"127.0.0.1:{cache[0].get('port')}",
                       f"{name}: --cachemgr={sf.get('cachemgr')} is not the cachemgr container")
            want = ",".join(f"127.0.0.1:{f.get('port')}" for _, f in sorted(workers))
            chk.expect(sf.get("workers") == want,
                       f"{name}: --workers={sf.get('workers')}, worker containers are {want}")
            chk.expect(all(f.get("block_size") == sf.get("block_size") for f in cache),
                       f"{name}: scheduler and cachemgr disagree on --block_size")
            sched_stop = (prestop_seconds(sc) or 0) + (int(sf.get("shutdown_grace_ms", 500)) +
                                                      int(sf.get("drain_timeout_ms", 10000))) / 1000
            for c, b, f in containers:
                if b in ("folio-cachemgr", "folio-worker"):
                    chk.expect((prestop_seconds(c) or 0) >= sched_stop,
                               f"{name}/{c['name']}: preStop must last the scheduler's shutdown "
                               f"({sched_stop}s) so in-flight requests can finish")

    def pod_ports(labels):
        return {p["name"]: p["containerPort"] for _, l, cs in pods if l == labels
                for c, _, _ in cs for p in c.get("ports", [])}

    services = {s["metadata"]["name"]: s for s in by_kind.get("Service", [])}
    for s in services.values():
        name = s["metadata"]["name"]
        matched = [l for _, l, _ in pods if selects(s["spec"].get("selector"), l)]
        if not chk.expect(matched, f"Service {name} selects no pod"):
            continue
        ports = pod_ports(matched[0])
        for p in s["spec"]["ports"]:
            target = p.get("targetPort", p["port"])
            chk.expect(target in ports or target in ports.values(),
                       f"Service {name}: targetPort {target} is no container port of its pods")

    # The frontend dials a Service that leads to the scheduler's --port: --scheduler, or
    # --replicas=dns:///NAME:PORT, whose NAME must be headless (one address per pod).
    for _, labels, containers in pods:
        for c, b, f in containers:
            if b != "folio-frontend":
                continue
            target = f.get("replicas") or f.get("scheduler", "")
            dns = target.startswith("dns:///")
            host, _, port = target[len("dns:///"):].rpartition(":") if dns else target.rpartition(":")
            svc = services.get(host)
            if not chk.expect(svc is not None, f"frontend target {target}: no Service {host}"):
                continue
            if dns:
                chk.expect(svc["spec"].get("clusterIP") == "None",
                           f"--replicas={target}: Service {host} is not headless, so its DNS "
                           "name gives one virtual address, not one per replica")
            sp = [p for p in svc["spec"]["ports"] if str(p["port"]) == port]
            sched_ports = [int(fl.get("port", -1)) for _, l, cs in pods for _, bb, fl in cs
                           if bb == "folio-scheduler" and selects(svc["spec"]["selector"], l)]
            tp = sp[0].get("targetPort") if sp else None
            resolved = pod_ports([l for _, l, _ in pods if selects(svc["spec"]["selector"], l)][0]
                                 ).get(tp, tp) if sp else None
            chk.expect(sp and resolved in sched_ports,
                       f"frontend target {target} does not reach a scheduler's --port")

    # Every metrics port is scraped by a PodMonitor or a ServiceMonitor.
    scraped = set()
    for pm in by_kind.get("PodMonitor", []):
        for _, labels, containers in pods:
            if selects(pm["spec"]["selector"]["matchLabels"], labels):
                names = pod_ports(labels)
                for ep in pm["spec"]["podMetricsEndpoints"]:
                    chk.expect(ep["port"] in names, f"PodMonitor: port {ep['port']} not in the pod")
                    scraped.add((tuple(sorted(labels.items())), ep["port"]))
    for sm in by_kind.get("ServiceMonitor", []):
        for s in services.values():
            if selects(sm["spec"]["selector"]["matchLabels"], s["metadata"].get("labels", {})):
                for ep in sm["spec"]["endpoints"]:
                    sp = [p for p in s["spec"]["ports"] if p.get("name") == ep["port"]]
                    if chk.expect(sp, f"ServiceMonitor: Service {s['metadata']['name']} has no "
                                      f"port {ep['port']}"):
                        for _, labels, _ in pods:
                            if selects(s["spec"]["selector"], labels):
                                scraped.add((tuple(sorted(labels.items())), sp[0]["targetPort"]))
    for _, labels, containers in pods:
        for c, _, _ in containers:
            for p in c.get("ports", []):
                if p["name"].endswith("metrics"):
                    chk.expect((tuple(sorted(labels.items())), p["name"]) in scraped,
                               f"{c['name']}: metrics port {p['name']} is not scraped by any monitor")

    prom_rules = by_kind.get("PrometheusRule", [])
    chk.expect(len(prom_rules) == 1 and prom_rules[0]["spec"] == rules,
               "PrometheusRule differs from deploy/prometheus/rules.yaml")

    for hpa in by_kind.get("HorizontalPodAutoscaler", []):
        ref = hpa["spec"]["scaleTargetRef"]
        chk.expect(any(w["metadata"]["name"] == ref["name"] for w in by_kind.get(ref["kind"], [])),
                   f"HPA {hpa['metadata']['name']} scales a missing {ref['kind']}")
    for pdb in by_kind.get("PodDisruptionBudget", []):
        chk.expect(any(selects(pdb["spec"]["selector"]["matchLabels"], l) for _, l, _ in pods),
                   f"PDB {pdb['metadata']['name']} selects no pod")

    gpus = [(c["name"], c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu"))
            for _, _, cs in pods for c, b, _ in cs]
    workers = [c["name"] for _, _, cs in pods for c, b, _ in cs if b == "folio-worker"]
    if overlay == "cpu-demo":
        chk.expect(all(g is None for _, g in gpus), f"cpu-demo requests GPUs: {gpus}")
        models = os.environ.get("FOLIO_MODELS_DIR")
        model = next(iter(config_maps.values()), {}).get("FOLIO_MODEL", "")
        if models and model.startswith("/models/"):
            chk.expect(os.path.exists(os.path.join(models, model[len("/models/"):])),
                       f"cpu-demo's model {model} is not in FOLIO_MODELS_DIR")
    if overlay == "cpu-demo-tls":
        for _, _, cs in pods:
            for c, b, f in cs:
                chk.expect(all(f.get(k) for k in ("tls_cert", "tls_key", "tls_ca")),
                           f"{c['name']}: cpu-demo-tls runs it without mutual TLS")
                if b == "folio-frontend":
                    chk.expect(f.get("http_tls_cert") and f.get("http_tls_key"),
                               "cpu-demo-tls: the frontend's HTTP API is not HTTPS")
    if overlay == "gpu-tp2":
        chk.expect(len(workers) == 2, f"gpu-tp2 should have two worker ranks, has {workers}")
        chk.expect(all(g == "1" for n, g in gpus if n in workers),
                   f"gpu-tp2 workers should each take one nvidia.com/gpu: {gpus}")
    return chk


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin_dir", required=True)
    parser.add_argument("--kubectl", default="kubectl")
    args = parser.parse_args()
    kubectl = shutil.which(args.kubectl)
    if kubectl is None:
        print(f"SKIP: {args.kubectl} is not on PATH")
        return SKIP
    with open(os.path.join(ROOT, "deploy", "prometheus", "rules.yaml")) as f:
        rules = yaml.safe_load(f)
    failures, checks = [], 0
    for overlay in OVERLAYS:
        chk = check_overlay(overlay, kubectl, args.bin_dir, rules)
        failures += chk.failures
        checks += chk.checks
    for f in failures:
        print("FAIL", f)
    print(f"{checks} checks over {len(OVERLAYS)} overlays, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
