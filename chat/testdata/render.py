#!/usr/bin/env python3
"""Render every chat template in templates/ over every conversation in
conversations.json the way Hugging Face transformers' apply_chat_template
does, and write what it gives to expected/. The Go test
(conformance_test.go) renders the same pairs with corral and compares
byte for byte; it reads only the files this script writes, so the tests do
not need Python.

Usage: python3 render.py   (from any directory; needs only Jinja2 >= 3.1)

How transformers renders, reproduced here:

  * an ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks,
    the loopcontrols extension ({% break %}, {% continue %}) and a
    {% generation %}...{% endgeneration %} block tag that renders its body
    (transformers uses it to find the assistant's tokens);
  * the tojson filter replaced by json.dumps(x, ensure_ascii=False,
    indent=..., separators=..., sort_keys=...), keyword arguments as given;
  * raise_exception(message) and strftime_now(format) as globals;
  * the variables messages, tools (None when the request has none),
    documents (None), add_generation_prompt, bos_token and eos_token, and
    the request's chat_template_kwargs;
  * for a template that reads functions and not tools (FireFunction v2's),
    what its callers pass as keyword arguments, and llama-server passed:
    functions, the tools as JSON text (json.dumps with indent 2, "" when
    there are none), and datetime, the time as "%b %d %Y %H:%M:%S GMT".

What the template is given, as an OpenAI-compatible server (corral, vLLM)
converts a chat completion request:

  * role "developer" becomes "system", which templates know;
  * content is a string: a string as sent, null as "", an array of text
    parts joined by newlines;
  * each message is a dict with role and content, then name, tool_calls
    and tool_call_id where the request sets them, then reasoning_content,
    thinking and reasoning (all three the request's reasoning_content:
    Qwen3, DeepSeek, GLM and Kimi read the first, gpt-oss and LFM2 the
    second, Gemma 4 and Solar the third);
  * a tool call's function.arguments, a JSON string on the wire, is
    decoded to the object it encodes (templates print it with tojson or
    iterate over it); text that is not a JSON object stays a string.

Fixed inputs, so that the output does not change from run to run:

  * strftime_now formats 2026-11-21 09:30:00 (a Saturday);
  * bos_token and eos_token are the text of each model's BOS and EOS
    tokens, from special_tokens.json (templates not listed there read
    neither, and get "").

Output, for template T and conversation C:

  * expected/T/C.txt: the rendered prompt, byte for byte (UTF-8);
  * expected/T/C.raise: the message of the template's raise_exception call
    (the template rejects the conversation);
  * expected/T/C.error: the exception, "Type: message", when rendering
    fails any other way (a bug of the template for that input).

Where a mutable sandbox (Jinja2's SandboxedEnvironment, which lets a
template change lists and dicts in place: corral's --chat-template-mutable)
renders a pair otherwise, what it gives is written the same way under
expected-mutable/ (Kimi K2's templates append to a list as they render
tool calls).
"""

import datetime
import json
import os
import shutil
import sys

import jinja2
from jinja2 import meta, nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
NOW = datetime.datetime(2026, 11, 21, 9, 30, 0)


class Raised(jinja2.exceptions.TemplateError):
    """What raise_exception raises (a TemplateError, as in transformers)."""


class GenerationTag(Extension):
    """{% generation %}body{% endgeneration %}: renders body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    def _render_body(self, caller):
        return caller()


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise Raised(message)


def strftime_now(fmt):
    return NOW.strftime(fmt)


def environment(cls=ImmutableSandboxedEnvironment):
    env = cls(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, "jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def text(content):
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(part["text"] for part in content)


def arguments(args):
    try:
        value = json.loads(args)
    except ValueError:
        return args
    return value if isinstance(value, dict) else args


def template_message(m):
    role = "system" if m["role"] == "developer" else m["role"]
    out = {"role": role, "content": text(m.get("content"))}
    if m.get("name"):
        out["name"] = m["name"]
    if m.get("tool_calls"):
        out["tool_calls"] = [
            {
                "id": c["id"],
                "type": c.get("type") or "function",
                "function": {"name": c["function"]["name"], "arguments": arguments(c["function"]["arguments"])},
            }
            for c in m["tool_calls"]
        ]
    if m.get("tool_call_id"):
        out["tool_call_id"] = m["tool_call_id"]
    if m.get("reasoning_content"):
        out["reasoning_content"] = m["reasoning_content"]
        out["thinking"] = m["reasoning_content"]
        out["reasoning"] = m["reasoning_content"]
    return out


def reads_functions(env, src):
    """The template reads functions and not tools (FireFunction v2's)."""
    names = meta.find_undeclared_variables(env.parse(src))
    return "functions" in names and "tools" not in names


def render(template, conv, tokens, functions=False):
    tools = conv.get("tools") or None
    extra = {}
    if functions:
        extra["functions"] = json.dumps(tools, ensure_ascii=False, indent=2) if tools else ""
        extra["datetime"] = NOW.strftime("%b %d %Y %H:%M:%S GMT")
    extra.update(conv.get("chat_template_kwargs", {}))
    return template.render(
        messages=[template_message(m) for m in conv["messages"]],
        tools=tools,
        documents=None,
        add_generation_prompt=conv["add_generation_prompt"],
        bos_token=tokens.get("bos_token", ""),
        eos_token=tokens.get("eos_token", ""),
        **extra,
    )


def outcome(template, conv, tokens, functions):
    """The render of one pair: (text, extension)."""
    try:
        return render(template, conv, tokens, functions), "txt"
    except Raised as e:
        return str(e), "raise"
    except Exception as e:  # a template's own bug for this input
        return "%s: %s" % (type(e).__name__, e), "error"


def write(out_dir, name, conv, body, ext):
    os.makedirs(os.path.join(out_dir, name), exist_ok=True)
    with open(os.path.join(out_dir, name, conv["name"] + "." + ext), "w", encoding="utf-8", newline="") as f:
        f.write(body)


def main():
    with open(os.path.join(HERE, "conversations.json"), encoding="utf-8") as f:
        convs = json.load(f)
    with open(os.path.join(HERE, "special_tokens.json"), encoding="utf-8") as f:
        special = json.load(f)
    out_dir = os.path.join(HERE, "expected")
    mutable_dir = os.path.join(HERE, "expected-mutable")
    shutil.rmtree(out_dir, ignore_errors=True)
    shutil.rmtree(mutable_dir, ignore_errors=True)
    env, mutable_env = environment(), environment(SandboxedEnvironment)
    names = sorted(f[: -len(".jinja")] for f in os.listdir(os.path.join(HERE, "templates")) if f.endswith(".jinja"))
    counts = {"txt": 0, "raise": 0, "error": 0}
    differ = 0
    for name in names:
        with open(os.path.join(HERE, "templates", name + ".jinja"), encoding="utf-8") as f:
            src = f.read()
        template, mutable_template = env.from_string(src), mutable_env.from_string(src)
        functions = reads_functions(env, src)
        os.makedirs(os.path.join(out_dir, name))
        for conv in convs:
            tokens = special.get(name, {})
            body, ext = outcome(template, conv, tokens, functions)
            counts[ext] += 1
            write(out_dir, name, conv, body, ext)
            mutable = outcome(mutable_template, conv, tokens, functions)
            if mutable != (body, ext):
                differ += 1
                write(mutable_dir, name, conv, *mutable)
    print("%d templates x %d conversations: %d rendered, %d raised, %d failed; %d otherwise in a mutable sandbox" % (
        len(names), len(convs), counts["txt"], counts["raise"], counts["error"], differ), file=sys.stderr)


if __name__ == "__main__":
    main()
