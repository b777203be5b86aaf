#!/usr/bin/env python3
"""TLS end to end through `tools/serve.py --tls_dir` (what `./folio serve --tls_dir` runs).

The test makes its certificates with openssl: a CA, one certificate for every service
(SAN 127.0.0.1 / localhost) signed by it, and a second CA with a client certificate of its
own. With them:
  - a completion over HTTPS works, which needs mutual TLS on every internal hop
    (frontend -> scheduler -> cachemgr, worker);
  - an HTTPS client without the CA refuses the server; plain HTTP gets no answer;
  - the internal gRPC services answer health checks only to clients with a certificate
    from the CA: not to plaintext clients, not to ones without a certificate, not to ones
    whose certificate another CA signed.

    tests/http/tls_e2e_test.py --bin_dir build/bin
Exit 77 when openssl is missing. The model: $FOLIO_MODELS_DIR's stories260K, else the embedded one.
"""
import argparse
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from local_cluster import LocalCluster  # noqa: E402


def make_certs(d):
    def run(*argv):
        subprocess.run(argv, cwd=d, check=True, capture_output=True)
    with open(os.path.join(d, "san.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for ca in ("ca", "other-ca"):
        run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{ca}.key",
            "-out", f"{ca}.crt", "-days", "2", "-subj", f"/CN=folio-test-{ca}")
    for name, ca in (("tls", "ca"), ("other", "other-ca")):
        run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
            "-out", f"{name}.csr", "-subj", f"/CN=folio-{name}")
        run("openssl", "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", "san.ext")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin_dir", required=True)
    args = p.parse_args()
    if not shutil.which("openssl"):
        print("SKIP: openssl is needed to make the test certificates")
        return 77
    d = tempfile.mkdtemp(prefix="folio-tls-")
    make_certs(d)
    cli = os.path.join(args.bin_dir, "folio-cli")
    failures = []

    def expect(ok, what):
        print(("ok   " if ok else "FAIL ") + what, flush=True)
        if not ok:
            failures.append(what)

    with LocalCluster(args.bin_dir, ["--tls_dir", d]) as c:
        url = c.http_url
        expect(url.startswith("https://"), f"the HTTP API is HTTPS ({url})")
        body = json.dumps({"prompt": "Once upon a time", "max_tokens": 8}).encode()

        def post(ctx):
            req = urllib.request.Request(url + "/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
                return r.status, json.loads(r.read())
        status, answer = post(ssl.create_default_context(cafile=os.path.join(d, "ca.crt")))
        expect(status == 200 and answer["choices"][0]["text"],
               "a completion over HTTPS, through mutual TLS on every internal hop")
        try:
            post(ssl.create_default_context())  # the system roots: not our CA
            expect(False, "an HTTPS client without the CA refuses the server")
        except urllib.error.URLError as e:
            expect(isinstance(e.reason, ssl.SSLCertVerificationError),
                   f"an HTTPS client without the CA refuses the server ({e.reason})")
        with socket.create_connection(("127.0.0.1", c.http_port), timeout=30) as s:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            try:
                got = s.recv(4096)
            except (ConnectionError, socket.timeout):
                got = b""
        expect(not got.startswith(b"HTTP/1.1 200"), "plain HTTP on the HTTPS port is not served")

        def health(address, *flags):
            r = subprocess.run([cli, "health", f"--server={address}", "--timeout_s=5", *flags],
                               capture_output=True, text=True)
            return r.returncode == 0 and "NOT_SERVING" not in r.stdout
        ca = f"--tls_ca={d}/ca.crt"
        mine = [f"--tls_cert={d}/tls.crt", f"--tls_key={d}/tls.key", ca]
        for name in ("scheduler", "cachemgr", "worker"):
            address = c.info[name]["grpc"]
            expect(health(address, *mine), f"{name}: a client with a certificate from the CA is served")
            expect(not health(address), f"{name}: a plaintext client is refused")
            expect(not health(address, f"--tls_cert={d}/other.crt", f"--tls_key={d}/other.key", ca),
                   f"{name}: a client whose certificate another CA signed is refused")
    shutil.rmtree(d, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
