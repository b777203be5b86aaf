#!/usr/bin/env python3
"""Speculative decoding: Folio with and without it, and against llama-server's (issue #49).

`./folio bench speculative` measures in one sitting, with the same thread count (2):

  1. synthetic acceptance, single stream, on the 1.1B Llama shape in F16 (the model of
     `./folio bench peer`, written by folio-make-model, cached in build/bench-models/peer):
     decode tokens/s without speculation, then with n-gram proposals accepted synthetically
     at mean lengths L (--lens, the model's own token included; `--spec_synth_len`), k
     proposals a step (--ks); llama-server likewise (`--spec-type ngram-simple
     --spec-synth-len L --spec-draft-n-max k`, plain without; with --llama_draft, as the
     issue's baseline, `-md DRAFT --spec-type draft-simple` instead, DRAFT a 2-layer dim-256
     model of the same vocabulary: llama.cpp's n-gram lookup drafts nothing when it finds no
     match, so its machinery is measured only when a draft model proposes every step;
     with --draft both engines propose with that draft model: Folio's workers run it
     beside the model, `--speculative=draft --draft_model DRAFT`). Folio: folio-bench, one
     request at a time (1000 / TPOT); llama-server: POST /completion, its own
     timings.predicted_per_second. The text is not the model's at L > 1: this measures the
     machinery (verification, rollback, the step protocol) at equal acceptance.
  2. real text: stories260K (a trained model), greedy, n-gram speculation off and on, a set
     of story openings and a prompt whose answer repeats its input (a story told twice,
     then its opening a third time): tokens/s and the acceptance the scheduler counted;
     and draft-model speculation with stories260K drafting for itself (the draft's greedy
     picks are the model's: the acceptance shows the draft's KV follows the model's; no
     speed-up is possible, the draft costs what the model does).
  3. batched: the 1.1B shape, 32 clients and 4 clients x (128 + 64) with n-gram speculation
     on and off (real acceptance on the random model's own output): output tokens/s; with
     --draft also with the draft model proposing (its real acceptance on a random model is
     near nothing: what the draft costs a batch).

Output (--out): results.json (machine, commands, figures), table.md; --write_docs puts the
table into docs/benchmarks.md between the speculative markers. --smoke: stories260K only,
a few tokens, no llama.cpp (a minute).
"""

import argparse
import datetime
import json
import os
import statistics
import sys
import time
import urllib.request

import _cluster
import _llama_tools
import peer
from _cluster import ROOT, log

MARK_BEGIN = "<!-- speculative:begin (./folio bench speculative --write_docs) -->"
MARK_END = "<!-- speculative:end -->"
# --draft runs write their table between these instead (both proposers' tables stay).
DRAFT_MARK_BEGIN = "<!-- speculative-draft:begin (./folio bench speculative --draft --write_docs) -->"
DRAFT_MARK_END = "<!-- speculative-draft:end -->"
SPEC_COUNTERS = ["folio_scheduler_speculative_proposed_tokens_total",
                 "folio_scheduler_speculative_accepted_tokens_total",
                 "folio_scheduler_speculative_accepted_length_count"]
STORY_PROMPTS = ["Once upon a time, there was a little girl named Lily.",
                 "Tom and his dog went to the park.",
                 "The sun was hot and the birds were singing.",
                 "One day, a big bear found a red ball."]
REPEAT_STORY = ("Lily had a red ball. She liked to play with it in the park. One day the ball "
                "went into the pond. A kind duck pushed it back to her. Lily said thank you.")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="./folio bench speculative", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin_dir", default=_cluster.DEFAULT_BIN_DIR)
    p.add_argument("--out", default=None, help="output folder (default bench-results/spec-DATE)")
    p.add_argument("--smoke", action="store_true", help="stories260K only, no llama.cpp")
    p.add_argument("--parts", default="synthetic,real,batched",
                   help="comma-separated: synthetic, real, batched")
    p.add_argument("--lens", default="1.5,2,3,4", help="synthetic mean lengths L")
    p.add_argument("--ks", default="4", help="proposals per step k (each engine's best is "
                                              "reported), comma-separated")
    p.add_argument("--tokens", type=int, default=96, help="tokens per single-stream request")
    p.add_argument("--rounds", type=int, default=2, help="single-stream requests per figure")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--no_llama", action="store_true", help="Folio alone")
    p.add_argument("--llama_draft", action="store_true",
                   help="llama-server proposes with a small draft model (draft-simple) "
                        "rather than n-gram lookup")
    p.add_argument("--draft", action="store_true",
                   help="the synthetic part proposes with the draft model on both engines "
                        "(Folio: --speculative=draft; llama-server: -md, as --llama_draft)")
    p.add_argument("--clients", default="32,4",
                   help="batched part: concurrent clients (and requests) per run, in order")
    p.add_argument("--spec_max_batch", type=int, default=32,
                   help="the batched part's --spec_max_batch (32: every client may speculate; "
                        "./folio serve's default is 8)")
    p.add_argument("--engines", default="folio,llama.cpp",
                   help="which engines the synthetic part runs, comma-separated")
    p.add_argument("--write_docs", action="store_true")
    p.add_argument("--startup_timeout_s", type=int, default=600)
    a = p.parse_args(argv)
    a.lens = [float(x) for x in a.lens.split(",") if x]
    a.ks = [int(x) for x in a.ks.split(",") if x]
    a.parts = [x for x in a.parts.split(",") if x]
    a.llama_draft = a.llama_draft or a.draft
    build = os.path.dirname(os.path.abspath(a.bin_dir))
    a.models_dir = os.path.join(build, "bench-models", "peer")
    a.reference_dir = _llama_tools.reference_dir(build)
    a.llama_cache = os.path.join(build, "llama-tools")
    if a.smoke:
        a.parts = [x for x in a.parts if x == "real"] or ["real"]
        a.no_llama, a.tokens, a.rounds = True, 24, 1
    if a.out is None:
        a.out = os.path.join(ROOT, "bench-results",
                             "spec-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    return a


class Sitting:
    def __init__(self, a):
        self.a = a
        os.makedirs(os.path.join(a.out, "logs"), exist_ok=True)
        os.makedirs(os.path.join(a.out, "runs"), exist_ok=True)
        self.rows, self.commands = [], []
        self.started = datetime.datetime.now(datetime.timezone.utc).isoformat()

    def path(self, *parts):
        return os.path.join(self.a.out, *parts)

    def add(self, row):
        row["load_after"] = peer.load_average()
        log(f"{row}")
        self.rows.append(row)
        with open(self.path("results.json"), "w") as f:
            json.dump({"started": self.started, "machine": peer.machine(),
                       "folio_commit": peer.git_commit(), "threads": self.a.threads,
                       "rows": self.rows, "commands": self.commands}, f, indent=2)


def spec_counters(cluster):
    """SPEC_COUNTERS, each summed over its labels (the proposer)."""
    try:
        return _cluster.counters(cluster.info["scheduler"]["metrics"], SPEC_COUNTERS,
                                 sum_labels=True)
    except OSError:
        return {}


def mean_len(before, after):
    """Tokens a verification gained on average, between two scrapes (None: none ran)."""
    n = after.get(SPEC_COUNTERS[2], 0) - before.get(SPEC_COUNTERS[2], 0)
    acc = after.get(SPEC_COUNTERS[1], 0) - before.get(SPEC_COUNTERS[1], 0)
    return None if n <= 0 else 1.0 + acc / n


def folio_single(s, cluster, name, prompt_args):
    """Median single-stream decode tokens/s over --rounds requests, and the mean length."""
    a = s.a
    rates = []
    before = spec_counters(cluster)
    for rnd in range(a.rounds):
        res = cluster.bench(["--workload=fixed", f"--output_len={a.tokens + 1}",
                             "--num_requests=1", "--max_concurrency=1", f"--seed={rnd}"]
                            + prompt_args, s.path("runs", f"{name}-{rnd}.json"), echo=False)
        rates.append(peer.pa.folio_decode_rate(res))
    s.commands.append(cluster.commands[-1])
    return statistics.median(rates), mean_len(before, spec_counters(cluster))


def llama_single(s, llama, model, name, extra):
    a = s.a
    argv = [llama["llama-server"], "-m", model, "-t", str(a.threads), "-tb", str(a.threads),
            "-fa", "on", "-c", "4096", "-np", "1", "--port", str(_cluster.free_port())] + extra
    s.commands.append(_cluster.quote(argv))
    rates = []
    with peer.LlamaServer(argv, s.path("logs", f"{name}.log"), 600) as server:
        for rnd in range(a.rounds):
            body = {"prompt": [1] + [100 + 37 * i + rnd for i in range(15)],
                    "n_predict": a.tokens, "temperature": 0, "ignore_eos": True,
                    "cache_prompt": False}
            req = urllib.request.Request(server.url + "/completion",
                                         data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=1800) as r:
                t = json.load(r)["timings"]
            rates.append(t["predicted_per_second"])
    # llama-server reports no verification count here: no measured length.
    return statistics.median(rates), None


def model_1b(s):
    class Run:  # what peer.make_models reads
        pass
    r = Run()
    r.args = argparse.Namespace(models_dir=s.a.models_dir, bin_dir=s.a.bin_dir,
                                shape=peer.FULL_SHAPE, types=["F16"], threads=s.a.threads)
    r.path = s.path
    return peer.make_models(r)["F16"]


def draft_model(s):
    """A 2-layer, dim-256 model of the 1.1B shape's vocabulary (llama.cpp's draft)."""
    path = os.path.join(s.a.models_dir, "peer-draft-2x256-f16.gguf")
    if not os.path.exists(path):
        sh = peer.FULL_SHAPE
        argv = [os.path.join(s.a.bin_dir, "folio-make-model"), f"--out={path}.tmp",
                "--dim=256", "--layers=2", "--heads=4", "--kv_heads=2", "--hidden_dim=768",
                f"--vocab={sh['vocab']}", f"--context={sh['context']}", "--dtype=f16",
                "--seed=2", "--name=peer-draft"]
        rc, out, err, _ = peer.run_tool(argv, s.path("logs", "make-draft.log"), 600)
        if rc != 0:
            raise RuntimeError(f"folio-make-model failed ({rc}):\n{(out + err)[-2000:]}")
        os.replace(path + ".tmp", path)
    return path


def serve_args(s, model, extra):
    return ["--model=" + model, f"--threads={s.a.threads}", "--kv_cache_bytes=512MiB",
            "--max_num_seqs=32", "--http_port=0"] + extra


def synthetic(s, llama):
    a = s.a
    model = model_1b(s)
    draft = draft_model(s) if a.draft or (llama and a.llama_draft) else None
    proposer = (["--speculative=draft", "--draft_model=" + draft] if a.draft else
                ["--speculative=ngram"])
    configs = [("off", None, [])] + [(f"L={l} k={k}", (l, k),
                                      proposer + [f"--spec_synth_len={l}",
                                                  f"--num_speculative_tokens={k}"])
                                     for l in a.lens for k in a.ks if l <= k + 1]
    prompt = ["--input_len=16"]
    for label, lk, extra in configs:
        name = label.replace(" ", "-")
        row = {"part": "synthetic", "config": label, "L": lk[0] if lk else 1.0,
               "k": lk[1] if lk else 0}
        if "folio" in a.engines:
            with _cluster.Cluster(a.bin_dir, serve_args(s, model, extra), s.path("logs"),
                                  name="folio-" + name,
                                  startup_timeout_s=a.startup_timeout_s) as c:
                s.commands.append(c.commands[0])
                rate, length = folio_single(s, c, "synth-" + name, prompt)
            s.add(dict(row, engine="folio", tokens_per_s=rate, measured_len=length,
                       proposer="draft model" if a.draft and lk else
                       ("n-gram" if lk else None)))
        if llama and "llama.cpp" in a.engines:
            if lk is None:
                lextra = []
            else:
                kind = (["-md", draft, "--spec-type", "draft-simple"] if draft else
                        ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-m",
                         str(lk[1])])
                lextra = kind + ["--spec-synth-len", str(lk[0]), "--spec-draft-n-max",
                                 str(lk[1])]
            rate, length = llama_single(s, llama, model, "llama-" + name, lextra)
            s.add(dict(row, engine="llama.cpp" + (" (draft model)" if draft and lk else ""),
                       tokens_per_s=rate, measured_len=length))


def http_rate(url, prompt, tokens):
    """Greedy completion of `tokens` tokens over HTTP: (tokens / wall seconds, tokens)."""
    with urllib.request.urlopen(url + "/v1/models", timeout=30) as r:
        model = json.load(r)["data"][0]["id"]
    body = {"model": model, "prompt": prompt, "max_tokens": tokens, "temperature": 0,
            "ignore_eos": True}
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    start = time.monotonic()
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.load(r)
    wall = time.monotonic() - start
    n = out["usage"]["completion_tokens"]
    return n / wall, n


def real(s):
    """stories260K over HTTP, one request at a time; tokens / wall time (the short prompt's
    prefill included, the same for both modes)."""
    a = s.a
    model = os.path.join(ROOT, "models", "stories260K", "stories260K.gguf")
    prompts = {"stories": STORY_PROMPTS,
               "repeat": [f"{REPEAT_STORY}\n\n{REPEAT_STORY}\n\n{REPEAT_STORY[:40]}"]}
    for mode in ["off", "ngram", "draft"]:
        extra = ["--speculative=" + mode, "--spec_ngram_min=1"]
        if mode == "draft":
            extra.append("--draft_model=" + model)  # the model drafting for itself
        with _cluster.Cluster(a.bin_dir, serve_args(s, model, extra), s.path("logs"),
                              name="folio-real-" + mode,
                              startup_timeout_s=a.startup_timeout_s) as c:
            s.commands.append(c.commands[0])
            url = c.http
            http_rate(url, "Warm up.", 8)
            for kind, texts in prompts.items():
                before = spec_counters(c)
                rates = []
                for text in texts:
                    for _ in range(a.rounds):
                        rates.append(http_rate(url, text, a.tokens * 2)[0])
                s.add({"part": "real", "engine": "folio", "config": f"{kind} {mode}",
                       "tokens_per_s": statistics.median(rates),
                       "measured_len": mean_len(before, spec_counters(c))})


def batched(s):
    a = s.a
    model = model_1b(s)
    modes = ["off", "ngram"] + (["draft"] if a.draft else [])
    for clients in [int(c) for c in a.clients.split(",")]:
        for mode in modes:
            extra = ["--speculative=" + mode, f"--spec_max_batch={a.spec_max_batch}"]
            if mode == "draft":
                extra.append("--draft_model=" + draft_model(s))
            with _cluster.Cluster(a.bin_dir, serve_args(s, model, extra),
                                  s.path("logs"), name=f"folio-batched-{clients}-{mode}",
                                  startup_timeout_s=a.startup_timeout_s) as c:
                s.commands.append(c.commands[0])
                before = spec_counters(c)
                res = c.bench(["--workload=fixed", "--input_len=128", "--output_len=64",
                               f"--num_requests={clients}", f"--max_concurrency={clients}",
                               "--seed=3"], s.path("runs", f"batched-{clients}-{mode}.json"),
                              echo=False)
                s.commands.append(c.commands[-1])
                s.add({"part": "batched", "engine": "folio", "config": f"{clients} {mode}",
                       "output_tok_s": res.get("output_throughput"),
                       "measured_len": mean_len(before, spec_counters(c))})


def table(s):
    """The synthetic part as Folio / llama-server pairs per (L, k), then the other parts."""
    rows = s.rows
    rate = lambda r: r.get("tokens_per_s") or r.get("output_tok_s")
    length = lambda r: f"{r['measured_len']:.2f}" if r.get("measured_len") else "-"
    out = []
    synth = [r for r in rows if r["part"] == "synthetic"]
    if synth:
        off = {r["engine"].split(" ")[0]: rate(r) for r in synth if r["config"] == "off"}
        out += ["| L (mean tokens/step) | k | Folio tok/s | vs Folio off | measured L | "
                "llama-server tok/s | vs llama off | Folio / llama |",
                "|---|---|---|---|---|---|---|---|"]
        for r in synth:
            if r["engine"] != "folio":
                continue
            l = next((x for x in synth if x["engine"] != "folio" and x["config"] == r["config"]),
                     None)
            f_ratio = f"{rate(r) / off['folio']:.2f}x" if off.get("folio") else "-"
            if l:
                l_ratio = f"{rate(l) / off['llama.cpp']:.2f}x" if off.get("llama.cpp") else "-"
                cols = [f"{rate(l):.1f}", l_ratio, f"{rate(r) / rate(l):.2f}x"]
            else:
                cols = ["-", "-", "-"]
            out.append(f"| {'off' if r['config'] == 'off' else r['L']} | "
                       f"{r['k'] or '-'} | {rate(r):.1f} | {f_ratio} | {length(r)} | "
                       + " | ".join(cols) + " |")
        out.append("")
    other = [r for r in rows if r["part"] != "synthetic"]
    if other:
        out += ["| part | config | tokens/s | vs off | mean tokens/verification |",
                "|---|---|---|---|---|"]
        for r in other:
            base = next((rate(x) for x in other if x["part"] == r["part"] and
                         x["config"] == r["config"].rsplit(" ", 1)[0] + " off"), None)
            ratio = f"{rate(r) / base:.2f}x" if base else "-"
            out.append(f"| {r['part']} | {r['config']} | {rate(r):.2f} | {ratio} | "
                       f"{length(r)} |")
    return "\n".join(out) + "\n"


def main(argv):
    a = parse_args(argv)
    _cluster.check_bench(a.bin_dir)
    s = Sitting(a)
    llama = None
    if not a.no_llama and "synthetic" in a.parts:
        ref = a.reference_dir
        llama, why = _llama_tools.find(a.llama_cache, ref)
        if llama is None:
            log(f"llama.cpp tools not cached ({why}); measuring Folio alone")
    log(f"output: {a.out}")
    if "synthetic" in a.parts:
        synthetic(s, llama)
    if "real" in a.parts:
        real(s)
    if "batched" in a.parts:
        batched(s)
    text = table(s)
    with open(s.path("table.md"), "w") as f:
        f.write(text)
    print(text)
    if a.write_docs:
        doc = os.path.join(ROOT, "docs", "benchmarks.md")
        with open(doc) as f:
            content = f.read()
        begin, end = (DRAFT_MARK_BEGIN, DRAFT_MARK_END) if a.draft else (MARK_BEGIN, MARK_END)
        if begin in content and end in content:
            head, rest = content.split(begin, 1)
            _, tail = rest.split(end, 1)
            with open(doc, "w") as f:
                f.write(head + begin + "\n" + text + end + tail)
        else:
            log(f"docs/benchmarks.md has no {begin} markers; table not written")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
