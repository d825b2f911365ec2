"""Chat templates rendered the way Hugging Face transformers renders them (the reference).

transformers' apply_chat_template compiles the template in an ImmutableSandboxedEnvironment with
trim_blocks and lstrip_blocks, the loopcontrols extension and its own {% generation %} tag, adds
the raise_exception and strftime_now globals and replaces the tojson filter with json.dumps
(ensure_ascii=False), then renders with messages, tools, documents, add_generation_prompt, the
tokenizer's special tokens and any extra keyword arguments. Debian's python3-jinja2 provides Jinja2.
"""

import json
from datetime import datetime


class TemplateRaised(Exception):
    """The template called raise_exception (or otherwise failed); str() is the message."""


def _environment():
    import jinja2
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class AssistantTracker(Extension):
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

        def _render(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def special_tokens_map(tokenizer_config):
    """transformers' special_tokens_map: the set special tokens of a tokenizer_config.json."""
    out = {}
    for key in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"):
        value = tokenizer_config.get(key)
        if isinstance(value, dict):
            value = value.get("content")
        if value:
            out[key] = value
    extra = tokenizer_config.get("additional_special_tokens")
    if extra:
        out["additional_special_tokens"] = [t.get("content") if isinstance(t, dict) else t for t in extra]
    return out


def render(template, case, specials):
    """Renders one conversation case ({"messages", "tools", "add_generation_prompt", extras})."""
    import jinja2

    kwargs = dict(specials)
    kwargs.update({k: v for k, v in case.items() if k not in ("messages", "tools", "add_generation_prompt")})
    try:
        compiled = _environment().from_string(template)
        return compiled.render(messages=case["messages"], tools=case.get("tools"), documents=None,
                               add_generation_prompt=case.get("add_generation_prompt", True), **kwargs)
    except (jinja2.exceptions.TemplateError, TypeError, ValueError, KeyError, AttributeError) as e:
        raise TemplateRaised("%s: %s" % (type(e).__name__, e))
