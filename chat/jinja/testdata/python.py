#!/usr/bin/env python3
"""Render cases.txt with Python's Jinja2 set up as transformers'
apply_chat_template sets it up, and write what each case renders (or the
exception it raises) to cases.json, which python_test.go compares the Go
engine with. Needs only Jinja2 >= 3.1: python3 python.py

cases.txt holds cases separated by lines "=====": a template, and
optionally a line "-----" followed by its variables as a JSON object.

It also renders cases.txt and mutable.txt (cases that change lists and
dicts in place) the same way but for a SandboxedEnvironment, which lets a
template change them, into cases_mutable.json: what the Go engine renders
with Options.Mutable.
"""

import copy
import json
import os

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))


class GenerationTag(Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    def _render_body(self, caller):
        return caller()


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def render_cases(env, names, out):
    chunks = []
    for name in names:
        with open(os.path.join(HERE, name), encoding="utf-8") as f:
            chunks += f.read().split("\n=====\n")
    cases = []
    for chunk in chunks:
        src, _, variables = chunk.partition("\n-----\n")
        variables = json.loads(variables) if variables.strip() else {}
        case = {"src": src, "vars": variables}
        try:
            # A copy: a template that changes a list must not change the
            # variables written to the JSON file.
            case["out"] = env.from_string(src).render(**copy.deepcopy(variables))
        except Exception as e:
            case["err"] = "%s: %s" % (type(e).__name__, e)
        cases.append(case)
    with open(os.path.join(HERE, out), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)
        f.write("\n")


def main():
    for cls, names, out in [
        (ImmutableSandboxedEnvironment, ["cases.txt"], "cases.json"),
        (SandboxedEnvironment, ["cases.txt", "mutable.txt"], "cases_mutable.json"),
    ]:
        env = cls(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, "jinja2.ext.loopcontrols"])
        env.filters["tojson"] = tojson
        render_cases(env, names, out)


if __name__ == "__main__":
    main()
