#!/usr/bin/env python3
"""Render chat-template reference cases with transformers' own Jinja2 machinery.

Usage: python3 tools/refgen/chat_cases.py testdata/chat/cases_input.json OUT.json

Each case renders the official Qwen3.6 template (engine/chat/qwen3_6_chat_template.jinja) or
its own inline "template". Messages get the preprocessing vLLM applies before rendering
(JSON-string tool-call arguments decoded, empty/null arguments -> {}, assistant "reasoning"
mirrored to "reasoning_content"), exactly what engine/chat does. Every case is rendered twice:
through transformers.utils.chat_template_utils (render_jinja_template when available, else
_compile_jinja_template) and through a hand-built ImmutableSandboxedEnvironment configured as
transformers documents it; the two must agree. The output keeps the input fields and adds
"expected" (the rendered string) or "error" ({"type", "message"}).
"""

import copy
import hashlib
import inspect
import json
import sys
from datetime import datetime
from pathlib import Path

import jinja2
import jinja2.ext
import transformers
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = Path(__file__).resolve().parents[2]
QWEN = (ROOT / "engine/chat/qwen3_6_chat_template.jinja").read_text(encoding="utf-8")


def preprocess(messages):
    """What vLLM's chat_utils does to messages before the template sees them."""
    for m in messages:
        if not isinstance(m, dict) or m.get("role") != "assistant":
            continue
        if "reasoning" in m and "reasoning_content" not in m:
            m["reasoning_content"] = m["reasoning"]
        calls = m.get("tool_calls")
        if not isinstance(calls, list):
            continue
        for c in calls:
            fn = c.get("function") if isinstance(c, dict) else None
            if not isinstance(fn, dict):
                continue
            args = fn.get("arguments")
            if args is None or args == "":
                fn["arguments"] = {}
            elif isinstance(args, str):
                fn["arguments"] = json.loads(args)
    return messages


def plain_env():
    """The environment transformers builds (chat_template_utils._compile_jinja_template)."""

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    class Generation(jinja2.ext.Extension):  # transformers' AssistantTracker tag, minus the tracking
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

        def _render(self, caller):
            return caller()

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render_transformers(src, messages, tools, agp, kwargs):
    from transformers.utils import chat_template_utils as ctu

    if hasattr(ctu, "render_jinja_template"):
        params = inspect.signature(ctu.render_jinja_template).parameters
        if "conversations" in params and "chat_template" in params:
            out = ctu.render_jinja_template(
                conversations=[messages], tools=tools, chat_template=src, add_generation_prompt=agp, **kwargs
            )
            rendered = out[0] if isinstance(out, tuple) else out
            return rendered[0] if isinstance(rendered, list) else rendered, "render_jinja_template"
    tmpl = ctu._compile_jinja_template(src)
    return tmpl.render(messages=messages, tools=tools, documents=None, add_generation_prompt=agp, **kwargs), "_compile_jinja_template"


def render_plain(env, src, messages, tools, agp, kwargs):
    return env.from_string(src).render(messages=messages, tools=tools, documents=None, add_generation_prompt=agp, **kwargs)


def outcome(fn):
    try:
        return {"expected": fn()}
    except Exception as e:  # the error is the reference
        return {"error": {"type": type(e).__name__, "message": str(e)}}


def main():
    src_path, out_path = sys.argv[1], sys.argv[2]
    doc = json.loads(Path(src_path).read_text(encoding="utf-8"))
    env = plain_env()
    paths, disagreements, out_cases = set(), [], []
    for case in doc["cases"]:
        src = case.get("template", QWEN)
        tools = case.get("tools")
        agp = case.get("add_generation_prompt", True)
        kwargs = case.get("chat_template_kwargs", {})
        used = []

        def via_transformers():
            text, path = render_transformers(src, preprocess(copy.deepcopy(case["messages"])), copy.deepcopy(tools), agp, copy.deepcopy(kwargs))
            used.append(path)
            return text

        a = outcome(via_transformers)
        b = outcome(lambda: render_plain(env, src, preprocess(copy.deepcopy(case["messages"])), copy.deepcopy(tools), agp, copy.deepcopy(kwargs)))
        paths.update(used)
        if a != b:
            disagreements.append(case["name"])
        out_cases.append({**case, **a})
    result = {
        "about": doc.get("about", ""),
        "generator": {
            "script": "tools/refgen/chat_cases.py",
            "python": sys.version.split()[0],
            "jinja2": jinja2.__version__,
            "transformers": transformers.__version__,
            "transformers_path": sorted(paths),
            "qwen_template_sha256": hashlib.sha256(QWEN.encode("utf-8")).hexdigest(),
            "disagreements_with_plain_env": disagreements,
        },
        "cases": out_cases,
    }
    Path(out_path).write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    errors = sum(1 for c in out_cases if "error" in c)
    print(f"{len(out_cases)} cases ({errors} errors), jinja2 {jinja2.__version__}, transformers {transformers.__version__}, "
          f"paths {sorted(paths)}, disagreements {disagreements}")


if __name__ == "__main__":
    main()
