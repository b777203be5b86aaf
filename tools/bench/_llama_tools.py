"""llama.cpp's tools for `./folio bench peer` (peer.py): llama-bench, llama-batched-bench,
llama-server and llama-quantize, built once into a cache folder under build/ and found
there afterwards. Not a benchmark itself (hence the underscore).

How they are built: only the tools' own sources (plus llama-server's mtmd and server
libraries) are compiled, against the prebuilt libllama.so / libllama-common.so / libggml*.so
that npm's node-llama-cpp ships in build/reference (`./folio reference`), from the llama.cpp
source clone of the same release (build/reference/llama.cpp, cloned from the package's
llama/gitRelease.bundle). CMake project: tools/bench/llama_tools/CMakeLists.txt. That is
minutes on 2 cores where a full llama.cpp build is about 30; the tools then run on the
same libraries Folio's reference tests use. Built with `nice -n 19` and at most 2 jobs
(the machine is shared), never in CI ($CI set)."""

import glob
import hashlib
import json
import os
import shutil
import subprocess

from _cluster import ROOT, log

TOOLS = ("llama-bench", "llama-batched-bench", "llama-server", "llama-quantize")
CMAKE_PROJECT = os.path.join(ROOT, "tools", "bench", "llama_tools")


def reference_dir(build_dir):
    """$FOLIO_REFERENCE_DIR, else BUILD_DIR/reference (where ./folio reference installs)."""
    return os.environ.get("FOLIO_REFERENCE_DIR") or os.path.join(build_dir, "reference")


def release_tag(ref_dir):
    """The llama.cpp release node-llama-cpp pins (llama/llama.cpp.info.json), or None."""
    info = os.path.join(ref_dir, "node_modules", "node-llama-cpp", "llama", "llama.cpp.info.json")
    try:
        with open(info) as f:
            return json.load(f)["tag"]
    except (OSError, ValueError, KeyError):
        return None


def prebuilt_libs(ref_dir):
    """The folder of node-llama-cpp's prebuilt CPU libraries (the one holding
    libllama-common.so), or None."""
    pattern = os.path.join(ref_dir, "node_modules", "@node-llama-cpp", "*", "bins", "*",
                           "libllama-common.so")
    found = sorted(p for p in glob.glob(pattern) if "cuda" not in p and "vulkan" not in p)
    return os.path.dirname(found[0]) if found else None


def stamp_text(tag):
    """What a finished build's stamp holds: the release and the CMake project's hash, so a
    changed project or release rebuilds."""
    with open(os.path.join(CMAKE_PROJECT, "CMakeLists.txt"), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    return f"{tag} {digest}\n"


def cache_dir(cache_root, tag):
    return os.path.join(cache_root, tag or "unknown")


def find(cache_root, ref, bin_dir=None):
    """(paths, why): {tool: path} of a usable build in cache_root (for the release of the
    reference in `ref`), or (None, the reason there is none). bin_dir: a folder holding
    the tools (any llama.cpp build), used as is."""
    if bin_dir:
        paths = {t: os.path.join(bin_dir, t) for t in TOOLS}
        missing = [t for t, p in paths.items() if not os.access(p, os.X_OK)]
        if missing:
            return None, f"{bin_dir} lacks {', '.join(missing)}"
        return paths, None
    tag = release_tag(ref)
    if tag is None:
        return None, f"no llama.cpp reference in {ref} (./folio reference installs it)"
    d = cache_dir(cache_root, tag)
    stamp = os.path.join(d, ".built")
    paths = {t: os.path.join(d, "bin", t) for t in TOOLS}
    try:
        with open(stamp) as f:
            ok = f.read() == stamp_text(tag)
    except OSError:
        ok = False
    if not ok or not all(os.access(p, os.X_OK) for p in paths.values()):
        return None, f"no llama.cpp tools built in {d} (./folio bench peer --build_llama builds them)"
    return paths, None


def build(cache_root, ref, jobs=2):
    """Builds the tools into cache_root/TAG from the reference in `ref` (see the module
    comment; installs it with ./folio reference when missing); returns {tool: path}.
    Raises RuntimeError with the reason (and the log's path) when it cannot."""
    if os.environ.get("CI"):
        raise RuntimeError("not building llama.cpp in CI ($CI is set)")
    if release_tag(ref) is None or not os.path.exists(
            os.path.join(ref, "llama.cpp", "include", "llama.h")):
        log("installing the llama.cpp reference (./folio reference)")
        env = dict(os.environ, FOLIO_REFERENCE_DIR=ref)
        subprocess.run([os.path.join(ROOT, "folio"), "reference"], check=True, env=env)
    tag = release_tag(ref)
    src = os.path.join(ref, "llama.cpp")
    libs = prebuilt_libs(ref)
    if tag is None or libs is None:
        raise RuntimeError(f"{ref} has no node-llama-cpp prebuilt libraries")
    d = cache_dir(cache_root, tag)
    build_dir = os.path.join(d, "cmake")
    os.makedirs(d, exist_ok=True)
    log_path = os.path.join(d, "build.log")
    log(f"building llama.cpp {tag}'s tools against the prebuilt libraries in {libs} "
        f"into {d} (nice -n 19, -j{jobs}; log: {log_path})")
    nice = ["nice", "-n", "19"]
    configure = nice + ["cmake", "-S", CMAKE_PROJECT, "-B", build_dir,
                        f"-DLLAMA_SRC={src}", f"-DLLAMA_LIBS={libs}",
                        f"-DTOOLS_BIN={os.path.join(d, 'bin')}",
                        "-DCMAKE_BUILD_TYPE=Release"]
    if shutil.which("ninja"):
        configure += ["-G", "Ninja"]
    if shutil.which("ccache"):
        configure += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache", "-DCMAKE_C_COMPILER_LAUNCHER=ccache"]
    with open(log_path, "w") as out:
        for argv in (configure, nice + ["cmake", "--build", build_dir, "-j", str(jobs),
                                        "--target", *TOOLS]):
            out.write("$ " + " ".join(argv) + "\n")
            out.flush()
            r = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT)
            if r.returncode != 0:
                raise RuntimeError(f"llama.cpp tools build failed (exit {r.returncode}); "
                                   f"see {log_path}")
    with open(os.path.join(d, ".built"), "w") as f:
        f.write(stamp_text(tag))
    paths, why = find(cache_root, ref)
    if paths is None:
        raise RuntimeError(f"llama.cpp tools built but not found: {why}")
    return paths
