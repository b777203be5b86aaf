#!/usr/bin/python3
"""Renders chat templates as Hugging Face transformers does (the reference for
jinja_reference_test.cc).

The environment is transformers' _compile_jinja_template (chat_template_utils.py):
ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the loopcontrols
extension and an extension for {% generation %} (rendered as its body), the globals
raise_exception and strftime_now, and the tojson filter redefined as json.dumps with
ensure_ascii=False. strftime_now reads a pinned date (--date) so outputs are reproducible.

Usage: hf_render.py --conversations FILE --date YYYY-MM-DD TEMPLATE.jinja...
Writes one JSON object to stdout:
  {"<template file name>": {"<conversation name>": {"ok": true, "text": "..."} |
                                                     {"ok": false, "error": "..."}}}
The context of a conversation is its "context" object (messages, tools,
add_generation_prompt, ...) plus bos_token and eos_token from the file's top level.
"""
import argparse
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationTracker(jinja2.ext.Extension):
    # transformers' AssistantTracker: {% generation %} ... {% endgeneration %} renders its body.
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env(date):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return date.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--conversations", required=True)
    ap.add_argument("--date", required=True)
    ap.add_argument("templates", nargs="+")
    args = ap.parse_args()
    date = datetime.datetime.strptime(args.date, "%Y-%m-%d")
    with open(args.conversations, encoding="utf-8") as f:
        fixtures = json.load(f)
    env = make_env(date)
    out = {}
    for path in args.templates:
        name = os.path.basename(path)
        results = out.setdefault(name, {})
        with open(path, encoding="utf-8") as f:
            source = f.read()
        try:
            template = env.from_string(source)
        except Exception as e:  # a template Jinja2 cannot parse fails every conversation
            template, parse_error = None, "%s: %s" % (type(e).__name__, e)
        for conv in fixtures["conversations"]:
            if template is None:
                results[conv["name"]] = {"ok": False, "error": parse_error}
                continue
            context = dict(conv["context"])
            context.setdefault("bos_token", fixtures["bos_token"])
            context.setdefault("eos_token", fixtures["eos_token"])
            try:
                results[conv["name"]] = {"ok": True, "text": template.render(**context)}
            except Exception as e:
                results[conv["name"]] = {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}
    json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
