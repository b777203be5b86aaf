#!/usr/bin/env bash
# ctest gguf_js_check: writes models with folio-make-model and verifies them with
# @huggingface/gguf, an independent GGUF parser.
#
#   run_check.sh PATH/TO/folio-make-model WORK_DIR
#
# npm installs the pinned package (package.json here) into WORK_DIR, never into the
# source tree. Exits 77 (ctest SKIP_RETURN_CODE) when node or npm is missing or the
# install fails (no registry access).
set -euo pipefail

make_model="$1"
work="$2"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

node="${FOLIO_NODE:-node}"  # Node 20 or later (@huggingface/gguf's requirement)
if ! command -v "$node" >/dev/null || ! command -v npm >/dev/null; then
  echo "SKIP: node and npm are needed for the @huggingface/gguf check" >&2
  exit 77
fi
mkdir -p "$work"
cp "$here/package.json" "$here/package-lock.json" "$here/check.mjs" "$work/"
if [[ ! -d "$work/node_modules/@huggingface/gguf" ]]; then
  if ! (cd "$work" && npm install --no-audit --no-fund --loglevel=error); then
    echo "SKIP: npm install @huggingface/gguf failed (is the npm registry reachable?)" >&2
    exit 77
  fi
fi

run() {  # run DTYPE TIED DIM HIDDEN LAYERS HEADS KV VOCAB CONTEXT THETA EPS
  local dtype="$1" tied="$2" dim="$3" hidden="$4" layers="$5" heads="$6" kv="$7" vocab="$8"
  local context="$9" theta="${10}" eps="${11}"
  local out="$work/model_${dtype}_${tied}_${vocab}.gguf"
  "$make_model" --out="$out" --dtype="$dtype" --tied="$tied" --dim="$dim" \
    --hidden_dim="$hidden" --layers="$layers" --heads="$heads" --kv_heads="$kv" \
    --vocab="$vocab" --context="$context" --rope_theta="$theta" --rms_eps="$eps" --seed=7
  "$node" "$work/check.mjs" "$out" "{\"dim\":$dim,\"hidden\":$hidden,\"layers\":$layers,\
\"heads\":$heads,\"kv_heads\":$kv,\"vocab\":$vocab,\"context\":$context,\"dtype\":\"$dtype\",\
\"tied\":$tied,\"rope_theta\":$theta,\"rms_eps\":$eps}"
}

run f32 false 64 172 2 8 4 512 512 10000 1e-05
run f16 true 64 96 3 4 2 300 128 500000 1e-06
run bf16 false 32 64 1 4 1 260 64 10000 1e-05
run q8_0 false 64 128 2 8 2 400 256 10000 1e-05
# The vocabulary sizes real models have (distinct pieces at every size).
run f16 true 32 64 1 4 2 4096 128 10000 1e-05
run f16 true 32 64 1 4 2 32000 128 10000 1e-05
run f16 true 32 64 1 4 2 128256 128 10000 1e-05
echo "gguf_js_check: all models match"
