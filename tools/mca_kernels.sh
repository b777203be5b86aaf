#!/usr/bin/env bash
# llvm-mca over the R = 1 (one token row, decode) inner loops of the quantized GEMV
# kernels, per microarchitecture (issue #51). For each kernel: compile its source to
# assembly with the build's own command line (build/compile_commands.json, so the same
# compiler, -O3 and per-file options; the ISA comes from the functions' target
# attributes / #pragma GCC target), cut out the function by its demangled name, cut out
# its hot loop (the N-th backward branch: from the branch's target label to the branch),
# and run llvm-mca on it for each -mcpu. Writes the full reports under OUT and prints one
# summary line per kernel and CPU.
#
#   tools/mca_kernels.sh [--build DIR] [--mca llvm-mca-16] [--cpus "sapphirerapids znver4"]
#                        [--out DIR] [--kernels "q8_0 q4_K q6_K" | all] [--print-loops]
#
# Needs: a configured build folder (compile_commands.json; CMAKE_EXPORT_COMPILE_COMMANDS is
# on in this project), c++filt, python3, and llvm-mca: the newest found is used. Debian 12
# has llvm-19 (apt-get install llvm-19: llvm-mca-19, Golden Cove ports for sapphirerapids);
# llvm-mca-16 accepts sapphirerapids but schedules it with the Skylake-X model (SKXPort*),
# llvm-mca-14 has no znver4.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build
MCA=
CPUS="sapphirerapids icelake-server znver4"
OUT=${TMPDIR:-/tmp}/mca_kernels
KERNELS="q8_0 q4_K q6_K"
PRINT_LOOPS=0
ITER=1000
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --mca) MCA=$2; shift 2 ;;
    --cpus) CPUS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --kernels) KERNELS=$2; shift 2 ;;
    --print-loops) PRINT_LOOPS=1; shift ;;
    -h|--help) sed -n 2,16p "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
if [[ -z $MCA ]]; then
  for m in llvm-mca-20 llvm-mca-19 llvm-mca-18 llvm-mca-17 llvm-mca-16 llvm-mca-15 llvm-mca-14 llvm-mca; do
    if command -v "$m" >/dev/null; then MCA=$m; break; fi
  done
fi
[[ -n $MCA ]] || { echo "no llvm-mca found (apt-get install llvm-16)" >&2; exit 1; }
[[ -f $BUILD/compile_commands.json ]] || { echo "no $BUILD/compile_commands.json" >&2; exit 1; }
mkdir -p "$OUT"
echo "# $($MCA --version | grep -i 'llvm version' | sed 's/^ *//'), compiler: $(c++ --version | head -1)"

# name | source | demangled function (substring) | which backward branch | weights per iteration
# (--kernels all: every line). The kernels TypedPathFor picks on an AVX-512 VNNI CPU (Sapphire Rapids, Ice Lake, Zen 4):
# q8_0 -> typed_dot_avx512.cc DotQ8_0Vnni<1> (x.q8_c present, so the kPre body, the first
# loop: 4 blocks = 128 weights a pass); q4_K / q6_K -> typed_quant_avx512.cc's VNNI copy,
# dot[0] = TileQ45K / TileQ6K at W = 1, R = 1 (one super-block = 256 weights a pass).
# The *.avx2 / *.avxvnni lines are the 256-bit paths of the same dots (typed_quant_avx2.cc,
# typed_dot_avx2.cc), for the 256- against 512-bit comparison; TypedPathFor does not pick
# them on an AVX-512 VNNI CPU.
table() {
  cat <<'EOF'
q8_0|services/worker/kernels/typed_dot_avx512.cc|DotQ8_0Vnni<1>(|1|128
q4_K|services/worker/kernels/typed_quant_avx512.cc|avx512_vnni::TileQ45K<false, true, 1, 1>(|1|256
q5_K|services/worker/kernels/typed_quant_avx512.cc|avx512_vnni::TileQ45K<true, true, 1, 1>(|1|256
q6_K|services/worker/kernels/typed_quant_avx512.cc|avx512_vnni::TileQ6K<true, 1, 1>(|1|256
q8_0.avxvnni|services/worker/kernels/typed_dot_avx2.cc|DotQ8_0Vnni<1>(|1|64
q4_K.avx2|services/worker/kernels/typed_quant_avx2.cc|DotQ45K<false, 1>(|1|256
q6_K.avx2|services/worker/kernels/typed_quant_avx2.cc|DotQ6K<1>(|1|256
EOF
}

# The build's command for SRC, turned into "-S -o OUT.s".
asm_of() {
  local src=$1 out=$2
  python3 - "$BUILD/compile_commands.json" "$ROOT/$src" "$out" <<'PY'
import json, shlex, subprocess, sys, os
db, src, out = sys.argv[1:4]
for e in json.load(open(db)):
    if os.path.realpath(e["file"]) == os.path.realpath(src):
        args = e.get("arguments") or shlex.split(e["command"])
        res, skip = [], False
        for a in args:
            if skip: skip = False; continue
            if a in ("-o", "-c"): skip = a == "-o"; continue
            if a == src or a == e["file"]: continue
            res.append(a)
        res = ["nice", "-n", "10"] + res + ["-S", "-o", out, src]
        subprocess.run(res, check=True, cwd=e["directory"])
        break
else:
    sys.exit("no compile command for " + src)
PY
}

# Function body (mangled label to .cfi_endproc) whose demangled name contains $2, then the
# $3-th loop: from a label to the first later jump back to it.
extract_loop() {
  local asm=$1 want=$2 nth=$3
  python3 - "$asm" "$want" "$nth" <<'PY'
import re, subprocess, sys
asm, want, nth = sys.argv[1], sys.argv[2], int(sys.argv[3])
lines = open(asm).read().split("\n")
labels = [(i, l[:-1]) for i, l in enumerate(lines) if re.match(r"^_Z\S*:$", l)]
dem = subprocess.run(["c++filt"], input="\n".join(m for _, m in labels), capture_output=True,
                     text=True, check=True).stdout.split("\n")
hits = [i for (i, m), d in zip(labels, dem) if want in d]
if not hits: sys.exit("function not found: " + want)
start = hits[0]
end = next(j for j in range(start, len(lines)) if ".cfi_endproc" in lines[j])
body = [l for l in lines[start:end] if not re.match(r"^\s*\.(cfi_|p2align|align|loc|file)", l)]
pos = {}
found = 0
for k, l in enumerate(body):
    m = re.match(r"^(\.L\w+):", l)
    if m: pos[m.group(1)] = k; continue
    m = re.match(r"^\s*j\w+\s+(\.L\w+)\s*$", l)
    if m and m.group(1) in pos:
        found += 1
        if found == nth:
            print("\n".join(body[pos[m.group(1)]:k + 1]))
            sys.exit(0)
sys.exit("loop %d not found in %s" % (nth, want))
PY
}

summarize() {
  python3 - "$@" <<'PY'
import re, sys
rep, name, cpu, wpi = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
t = open(rep).read()
def num(key):
    m = re.search(r"^%s:\s+([\d.]+)" % key, t, re.M)
    return float(m.group(1)) if m else float("nan")
iters, instrs, cycles, uops, rthr = (num("Iterations"), num("Instructions"), num("Total Cycles"),
                                    num("Total uOps"), num("Block RThroughput"))
ipi = instrs / iters
cpi = cycles / iters
# Resource names and per-iteration pressure.
names = {i: n + ("/" + i.split(".")[1] if "." in i else "")
         for i, n in re.findall(r"^\[(\d+(?:\.\d+)?)\]\s+-\s+(\S+)", t, re.M)}
m = re.search(r"Resource pressure per iteration:\n(.*)\n(.*)\n", t)
top = ""
if m:
    heads = re.findall(r"\[([\d.]+)\]", m.group(1))
    vals = m.group(2).split()
    pairs = []
    for h, v in zip(heads, vals):
        if v != "-": pairs.append((float(v), names.get(h, h)))
    pairs.sort(reverse=True)
    top = ", ".join("%s %.2f" % (n, v) for v, n in pairs[:4])
b = re.search(r"Cycles with backend pressure increase \[ ([\d.]+)% \]", t)
bp = re.search(r"Throughput Bottlenecks:.*?(?=\n\n)", t, re.S)
bot = " ".join(bp.group(0).split()) if bp else "no bottleneck report"
per256 = cpi * 256 / wpi if wpi else float("nan")
print("%-5s %-15s instr/iter %5.1f  uops/iter %5.1f  weights/iter %3d  RThroughput %6.2f  "
      "sim cycles/iter %6.2f  cycles/256w %6.2f (RThr %6.2f)\n      top ports: %s\n      %s"
      % (name, cpu, ipi, uops / iters, wpi, rthr, cpi, per256,
         rthr * 256 / wpi if wpi else float("nan"), top, bot))
PY
}

declare -A done_asm
while IFS='|' read -r name src func nth wpi; do
  [[ $KERNELS == all || " $KERNELS " == *" $name "* ]] || continue
  base=$(basename "$src" .cc)
  asm=$OUT/$base.s
  if [[ -z ${done_asm[$base]:-} ]]; then
    asm_of "$src" "$asm"
    done_asm[$base]=1
  fi
  extract_loop "$asm" "$func" "$nth" >"$OUT/$name.loop.s"
  if [[ $PRINT_LOOPS == 1 ]]; then echo "## $name: $func loop $nth"; cat "$OUT/$name.loop.s"; fi
  if [[ $wpi == 0 ]]; then continue; fi
  for cpu in $CPUS; do
    rep=$OUT/$name.$cpu.txt
    "$MCA" -mtriple=x86_64-unknown-linux-gnu -mcpu="$cpu" -iterations=$ITER \
      -bottleneck-analysis -timeline=false "$OUT/$name.loop.s" >"$rep" 2>"$rep.err" || {
      echo "$name $cpu: llvm-mca failed, see $rep.err"; continue; }
    summarize "$rep" "$name" "$cpu" "$wpi"
  done
done < <(table)
echo "# full reports: $OUT/<kernel>.<cpu>.txt, loops: $OUT/<kernel>.loop.s"
