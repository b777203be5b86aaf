#!/usr/bin/env python3
"""The docs' commands name what exists: every shell block of README.md, docs/quickstart.md,
docs/deploy.md, docs/http-api.md and docs/benchmarks.md is read as a shell would split it,
and for each command

  - build/bin/NAME: the binary is built; a folio-* tool takes every --flag given (its
    --helpfull; benchmark and test binaries would run, so only their existence counts);
  - ./folio CMD: CMD is one of ./folio's commands; `./folio serve` takes every flag
    (tools/serve.py --help); `./folio bench NAME` has tools/bench/NAME.py, which takes
    every flag given;
  - python3 tools/X.py: the script exists and takes every flag given;

and every path into the clone a block names (models/..., deploy/..., proto/..., tools/...)
exists. Links between the docs ([text](file.md#anchor)) reach a file and a heading that
exist. Commands of other programs (curl, kubectl, protoc) are not checked beyond their
paths. tests/grpc_python_recipe_test.py runs the quickstart's Python block itself.

  docs_commands_test.py --bin_dir build/bin

Exits 0 when every check passes, 1 otherwise.
"""
import argparse
import functools
import os
import re
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ["README.md", "docs/quickstart.md", "docs/deploy.md", "docs/http-api.md",
        "docs/benchmarks.md", "docs/architecture.md", "docs/metrics.md"]
# Of those, the ones whose shell blocks are commands to check (architecture.md and
# metrics.md only for their links).
COMMAND_DOCS = DOCS[:5]
TREE_DIRS = ("models/", "deploy/", "docker/", "proto/", "tests/", "tools/", "services/",
             "common/", "docs/", "bench/", "kernels/")
OPERATORS = {"|", "||", "&", "&&", ";", "(", ")", ">", ">>", "<", "<<", "2>", "2>&1", "|&"}

failures = []


def fail(doc, line, message):
    failures.append(f"{doc}:{line}: {message}")
    print(f"FAIL: {doc}:{line}: {message}", flush=True)


def shell_blocks(text):
    """(first line number, list of (line number, logical line)) for each sh/bash block,
    continuation lines joined and heredoc bodies left out."""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^\s*```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        lang = m.group(1)
        i += 1
        body = []
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            body.append((i + 1, lines[i]))
            i += 1
        i += 1
        if lang not in ("sh", "bash", "shell"):
            continue
        logical = []
        heredoc = None
        pending = None
        for number, line in body:
            if heredoc is not None:
                if line.strip() == heredoc:
                    heredoc = None
                continue
            m = re.search(r"<<-?\s*'?\"?(\w+)'?\"?", line)
            if m:
                heredoc = m.group(1)
            if pending is not None:
                pending = (pending[0], pending[1] + " " + line.strip())
            else:
                pending = (number, line)
            if pending[1].endswith("\\"):
                pending = (pending[0], pending[1][:-1])
                continue
            logical.append(pending)
            pending = None
        if pending is not None:
            logical.append(pending)
        yield logical


def split_commands(line):
    """Each simple command of a shell line, as a list of words (comments dropped)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        words = list(lexer)
    except ValueError:
        return []
    commands, current, skip_next = [], [], False
    for w in words:
        if skip_next:  # the target of a redirection
            skip_next = False
            continue
        if w in OPERATORS or set(w) <= set(";&|()<>"):
            if w.endswith((">", "<")) or w in (">", ">>", "<"):
                skip_next = True
            if current:
                commands.append(current)
            current = []
            continue
        current.append(w)
    if current:
        commands.append(current)
    # Leading VAR=value assignments are not the command.
    return [[w for w in c[next((k for k, w in enumerate(c) if not re.match(r"^\w+=", w)), len(c)):]]
            for c in commands]


@functools.lru_cache(maxsize=None)
def help_text(argv):
    try:
        r = subprocess.run(list(argv), capture_output=True, text=True, timeout=60, cwd=ROOT)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"<cannot run {' '.join(argv)}: {e}>"
    return r.stdout + r.stderr


def flags_of(help_output):
    return set(re.findall(r"(?:^|\s|\[)--?([A-Za-z][\w-]*)", help_output))


def check_flags(doc, number, words, known, what):
    for w in words:
        if not w.startswith("--") or w == "--":
            continue
        name = w[2:].split("=", 1)[0]
        if name in known or (name.startswith("no") and name[2:] in known):
            continue
        fail(doc, number, f"{what} takes no {w.split('=', 1)[0]}")


def check_paths(doc, number, words, bin_dir):
    for w in words:
        for candidate in [w] + w.split("=")[1:]:
            candidate = candidate.strip("'\"")
            if candidate.startswith("build/bin/"):
                if not os.path.exists(os.path.join(bin_dir, candidate[len("build/bin/"):])):
                    fail(doc, number, f"{candidate} is not built")
            elif candidate.startswith(TREE_DIRS) and not any(c in candidate for c in "*$<>{"):
                if not os.path.exists(os.path.join(ROOT, candidate)):
                    fail(doc, number, f"{candidate} does not exist in the clone")


def check_command(doc, number, words, bin_dir):
    if not words:
        return
    cmd = words[0]
    if cmd.startswith("build/bin/"):
        name = cmd[len("build/bin/"):]
        binary = os.path.join(bin_dir, name)
        # Only the folio-* tools parse Abseil flags; a benchmark or test binary would start
        # running (or reject --helpfull), so those are checked for existence alone.
        if name.startswith("folio-") and os.path.exists(binary):
            check_flags(doc, number, words[1:], flags_of(help_text((binary, "--helpfull"))), cmd)
    elif cmd == "./folio":
        sub = words[1] if len(words) > 1 else "help"
        usage = help_text(("./folio", "--help"))
        if sub.startswith("-"):
            return
        if not re.search(rf"\./folio {re.escape(sub)}\b", usage):
            fail(doc, number, f"./folio has no command '{sub}'")
        elif sub == "serve":
            check_flags(doc, number, words[2:],
                        flags_of(help_text((sys.executable, "tools/serve.py", "--help"))),
                        "./folio serve")
        elif sub == "bench" and len(words) > 2 and not words[2].startswith("-"):
            script = os.path.join("tools", "bench", words[2] + ".py")
            if not os.path.exists(os.path.join(ROOT, script)):
                fail(doc, number, f"./folio bench {words[2]}: no {script}")
            else:
                check_flags(doc, number, words[3:],
                            flags_of(help_text((sys.executable, script, "--help"))),
                            f"./folio bench {words[2]}")
    elif cmd in ("python3", sys.executable) and len(words) > 1 and words[1].startswith("tools/"):
        script = words[1]
        if os.path.exists(os.path.join(ROOT, script)):
            check_flags(doc, number, words[2:],
                        flags_of(help_text((sys.executable, script, "--help"))), script)


def anchors(path):
    """GitHub's heading anchors of a markdown file."""
    seen, out = {}, set()
    with open(path) as f:
        in_code = False
        for line in f:
            if line.lstrip().startswith("```"):
                in_code = not in_code
            if in_code:
                continue
            m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if not m:
                continue
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def check_links(doc, text):
    base = os.path.dirname(os.path.join(ROOT, doc))
    for number, line in enumerate(text.split("\n"), 1):
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if re.match(r"^[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            full = os.path.normpath(os.path.join(base, path)) if path else os.path.join(ROOT, doc)
            if not os.path.exists(full):
                fail(doc, number, f"link to {target}: no {os.path.relpath(full, ROOT)}")
            elif anchor and full.endswith(".md") and anchor not in anchors(full):
                fail(doc, number, f"link to {target}: no heading #{anchor}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin_dir", required=True)
    args = p.parse_args()
    bin_dir = os.path.abspath(args.bin_dir)
    checked = 0
    for doc in DOCS:
        with open(os.path.join(ROOT, doc)) as f:
            text = f.read()
        check_links(doc, text)
        if doc not in COMMAND_DOCS:
            continue
        for block in shell_blocks(text):
            for number, line in block:
                for words in split_commands(line):
                    check_paths(doc, number, words, bin_dir)
                    check_command(doc, number, words, bin_dir)
                    checked += 1
    print(f"{checked} commands checked, {len(failures)} problems")
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
