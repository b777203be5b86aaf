#!/usr/bin/env python3
"""Checks docker/*.Dockerfile without a Docker engine: each is multi-stage, builds through
./folio install (the script CI builds with), installs the runtime packages that script
lists, copies every binary ./folio installs, and runs as a numeric non-root user; and
.dockerignore keeps the build folder and .git out of the context but no source."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    failures = []
    folio = open(os.path.join(ROOT, "folio")).read()
    if not re.search(r"^\s*install\) install_to", folio, re.M):
        failures.append("./folio has no install command")
    for name in ["cpu.Dockerfile", "cuda.Dockerfile"]:
        text = open(os.path.join(ROOT, "docker", name)).read()
        froms = re.findall(r"^FROM\s+(\S+)", text, re.M)
        if len(froms) != 2 or " AS build" not in text:
            failures.append(f"{name}: want a build stage and a runtime stage, got {froms}")
        if not re.search(r"RUN .*\\\n(?:.*\\\n)*\s*\./folio install /opt/folio", text) and \
                "./folio install /opt/folio" not in text:
            failures.append(f"{name}: does not build with ./folio install")
        if "runtime-packages.txt" not in text:
            failures.append(f"{name}: does not install the listed runtime packages")
        if "COPY --from=build /opt/folio/bin/ /usr/local/bin/" not in text:
            failures.append(f"{name}: does not copy the binaries to /usr/local/bin")
        users = re.findall(r"^USER\s+(\S+)", text, re.M)
        if not users or not re.fullmatch(r"[1-9][0-9]*:[0-9]+", users[-1]):
            failures.append(f"{name}: the last USER should be numeric and non-root, got {users}")
    if "cuda:" not in open(os.path.join(ROOT, "docker", "cuda.Dockerfile")).read():
        failures.append("cuda.Dockerfile: not based on the CUDA images")
    ignore = open(os.path.join(ROOT, ".dockerignore")).read().split()
    for needed in ["build/", ".git/"]:
        if needed not in ignore:
            failures.append(f".dockerignore should exclude {needed}")
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    for path in tracked.stdout.split():
        top = path.split("/")[0] + "/"
        if top in ("build/", ".git/"):
            failures.append(f".dockerignore drops the tracked file {path}")
    for f in failures:
        print("FAIL", f)
    print(f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
