"""Owned generation ranges: ``tokenize_chat(loss_scope="after_last_user")`` over a tagged template.

Theory of operation
-------------------
``after_last_user`` supervises only the assistant messages after the last user message, so each
``{% generation %}`` block of the template must be attributed to the *input message* it renders.
The Hugging Face assistant mask cannot say that: it is one 0/1 mask over every block (and
transformers >= 5 marks tokens by overlap, while zephon 0.2.0 maps block endpoints with
``char_to_token`` and stops at the first block whose start maps to no token).  zephon 0.2.0
defines the scope by a renderer of its own, reproduced here as zephon documents and behaves:

* **compile** (:class:`OwnedTemplate`): the template is parsed in the tokenizer library's own
  Jinja environment with a ``generation`` tag of ours.  Each block is given the variables of
  the ``for`` loops around it; at render time its owner is the innermost of them that *is* one
  of the input messages (identity, not equality).  Refused at compile time (ConfigError): no
  block, a block outside any loop, a block inside a macro / call / filter / set block, a
  recursive loop or another block, ``include`` / ``import`` / ``extends``, rebinding an
  enclosing loop variable outside a block, and a comparison on message text that replacing
  the text by markers would change (``==``, a non-zero length test; literal ``in`` tests and
  one-literal ``startswith`` / ``endswith`` are kept as *controls*, with ``<think>`` and
  ``</think>``).
* **render**: the text (add_generation_prompt False) and, per block in output order,
  ``(owner, start, end)`` character ranges; a block with no owner, a non-assistant owner, or
  ranges out of order is a template error.
* **verify** (:func:`verify`, the structure check): every text field of every message
  (content, its text parts, reasoning_content, reasoning, thinking, and an object tool-call
  argument) is replaced by a marker ``zephon_probe_<message>_<n>_text`` (split around the
  controls, surrounding whitespace kept) and the probe is rendered.  It must equal the
  tokenizer's own render; a marker inside a block of another owner, or of a non-assistant,
  is ``CHAT_CONTENT_OWNERSHIP``; a selected assistant's marker not wholly inside its own
  blocks ``CHAT_REQUIRED_SUPERVISION``; one missing from the text ``CHAT_REQUIRED_CONTENT``;
  and the ``all_assistant`` mask of the owned ranges must equal the tokenizer's
  ``return_assistant_tokens_mask`` (at full length, and at 8 tokens in the setup probes).
  A tool call whose arguments are not a JSON object is probed by substitution (its arguments,
  or its name when they are empty) and the changed range is judged like a marker.
  Setup verifies ``user, assistant`` and ``user, assistant, user, assistant`` (every text
  ``"text"``) once; each record is verified before it is tokenized.  zephon caches successful
  verifications process-wide by a message-structure key that does not see whitespace around a
  text, which the check does see; the reference caches nothing and verifies every record, as a
  fresh zephon process verifies its first record of a structure (divergence D-19).
* **mask** (:func:`owned_mask`): the selected owners' ranges mapped through the encoding of the
  real render by zephon's endpoint rule.

The tokenizer comes from the caller; the Jinja environment is the one its library renders with
(imported when a verifier is built, never at module import: the semantics run without the
``hf`` extra).

What may not live here: loss-scope choice, EOS handling, tombstones (tokenize_chat's).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from zephon_ref.errors import ConfigError, Issue, ValidationError, ValidationReport, expected

__all__ = [
    "CONTENT",
    "INVALID",
    "OWNERSHIP",
    "SUPERVISION",
    "TEXT_FIELDS",
    "OwnedTemplate",
    "TemplateVerificationError",
    "owned_mask",
    "selected_indices",
    "setup_check",
    "verify",
]

TEXT_FIELDS = ("content", "reasoning_content", "reasoning", "thinking")
#: the issue codes zephon reports (its ValidationReport's); only CONTENT alone drops a record
INVALID, OWNERSHIP, SUPERVISION, CONTENT = (
    "CHAT_TEMPLATE_INVALID",
    "CHAT_CONTENT_OWNERSHIP",
    "CHAT_REQUIRED_SUPERVISION",
    "CHAT_REQUIRED_CONTENT",
)
_STATE = "__zephon_ref_owned_ranges"
_SETUP_ROLES = (("user", "assistant"), ("user", "assistant", "user", "assistant"))


class TemplateVerificationError(ValidationError):
    """The template failed a verification: zephon's ValidationError (a RuntimeError) with a report of
    its issue codes; ``codes`` are those found (CHAT_INPUT_CONTEXT names the record, as zephon's)."""

    def __init__(self, codes: Sequence[str], detail: str, *, context: str = "") -> None:
        found = list(dict.fromkeys(codes))  # first-seen order, once each
        issues = [
            Issue(
                "error",
                code,
                "tokenize_chat",
                expected(
                    "generation blocks inside the assistant's message loop covering its content, "
                    "nothing else's",
                    code,
                    detail,
                ),
            )
            for code in found
        ]
        if context:
            issues.append(Issue("error", "CHAT_INPUT_CONTEXT", "tokenize_chat", context))
        super().__init__(ValidationReport(issues))
        self.codes = frozenset(found)


class _Invalid(ValueError):
    """A template error found while verifying (reported as CHAT_TEMPLATE_INVALID)."""


def selected_indices(messages: Sequence[Mapping[str, Any]], scope: str) -> set[int]:
    """The assistant indices ``scope`` supervises (every one, or those after the last user)."""
    assistants = {i for i, m in enumerate(messages) if m.get("role") == "assistant"}
    if scope != "after_last_user":
        return assistants
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    return {i for i in assistants if users and i > users[-1]}


# -- compile --------------------------------------------------------------------------------------


def _reads_text(node: Any, names: set[str], nodes: Any) -> bool:
    if isinstance(node, nodes.Name) and node.name in names:
        return True
    if isinstance(node, nodes.Getattr) and node.attr in TEXT_FIELDS:
        return True
    if (
        isinstance(node, nodes.Getitem)
        and isinstance(node.arg, nodes.Const)
        and node.arg.value in TEXT_FIELDS
    ):
        return True
    return any(_reads_text(c, names, nodes) for c in node.iter_child_nodes())


def _controls(ast: Any, nodes: Any) -> tuple[str, ...]:
    """The literal texts a marker probe must keep (see the module docstring), longest first."""
    names = set(TEXT_FIELDS)  # text fields and the names assigned from them (to a fixed point)
    assigns = list(ast.find_all(nodes.Assign))
    grown = True
    while grown:
        grown = False
        for a in assigns:
            if (
                isinstance(a.target, nodes.Name)
                and a.target.name not in names
                and _reads_text(a.node, names, nodes)
            ):
                names.add(a.target.name)
                grown = True
    found = {"<think>", "</think>"}
    for node in ast.find_all((nodes.Compare, nodes.Call)):
        if isinstance(node, nodes.Compare):
            if not _reads_text(node, names, nodes):
                continue
            left = node.expr
            for op in node.ops:
                right = op.expr
                if _reads_text(left, names, nodes) or _reads_text(right, names, nodes):
                    literal_in = (
                        op.op in ("in", "notin")
                        and isinstance(left, nodes.Const)
                        and isinstance(left.value, str)
                        and left.value
                    )
                    emptiness = (
                        isinstance(left, nodes.Filter)
                        and left.name in ("length", "count")
                        and isinstance(right, nodes.Const)
                        and right.value == 0
                        and op.op in ("eq", "ne", "gt", "lteq")
                    ) or (
                        isinstance(right, nodes.Const) and right.value in (None, "") and op.op in ("eq", "ne")
                    )
                    if literal_in:
                        found.add(left.value)
                    elif not emptiness:
                        raise ConfigError(
                            expected(
                                f"chat template line {node.lineno}",
                                "no comparison on message text other than emptiness or a literal "
                                "'in' (verification replaces text by markers)",
                                "a content-dependent comparison",
                            )
                        )
                left = right
        elif (
            isinstance(node.node, nodes.Getattr)
            and node.node.attr in ("startswith", "endswith")
            and _reads_text(node.node.node, names, nodes)
        ):
            arg = node.args[0] if len(node.args) == 1 else None
            if (
                arg is None
                or not isinstance(arg, nodes.Const)
                or not isinstance(arg.value, str)
                or not arg.value
                or node.kwargs
                or node.dyn_args is not None
                or node.dyn_kwargs is not None
            ):
                raise ConfigError(
                    expected(
                        f"chat template line {node.lineno}",
                        f"{node.node.attr}() on message text with one non-empty string literal",
                        "another argument",
                    )
                )
            found.add(arg.value)
    return tuple(sorted(found, key=lambda t: (-len(t), t)))


@dataclass
class _Render:
    """One render's state: message identities, the output position, and the ranges found."""

    owners: dict[int, int]
    messages: list[dict[str, Any]]
    at: int = 0
    ranges: list[tuple[int, int, int]] = field(default_factory=list)


class OwnedTemplate:
    """A tagged template compiled with owner-recording ``generation`` blocks (module docstring)."""

    def __init__(self, template: str) -> None:
        from jinja2 import nodes
        from jinja2.ext import Extension
        from transformers.utils.chat_template_utils import _compile_jinja_template

        if _STATE in template:
            raise ConfigError(expected("chat template", f"no use of the reserved name {_STATE}", template))

        def owned(context: Any, line: int, *loop_values: Any, caller: Callable[[], str]) -> str:
            state: _Render = context.resolve(_STATE)
            owner = next((state.owners[id(v)] for v in loop_values if id(v) in state.owners), None)
            if owner is None:
                raise _Invalid(
                    f"generation block at line {line}: no enclosing loop variable is an input message"
                )
            if state.messages[owner].get("role") != "assistant":
                raise _Invalid(f"generation block at line {line}: its message {owner} is not an assistant's")
            text = caller()
            state.ranges.append((owner, state.at, state.at + len(text)))
            return text

        class Owned(Extension):
            # above the tokenizer library's own generation tag (priority 100): this parse wins
            tags = {"generation"}
            priority = 150

            def parse(self, parser: Any) -> Any:
                line = next(parser.stream).lineno
                body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
                call = nodes.Call(
                    nodes.Name("_zephon_ref_owned", "load"), [nodes.Const(line)], [], None, None
                )
                return nodes.CallBlock(call, [], [], body).set_lineno(line)

        env = _compile_jinja_template("").environment.overlay(extensions=[Owned])
        env.globals["_zephon_ref_owned"] = _pass_context(owned)
        try:
            ast = env.parse(template)
        except Exception as e:
            raise ConfigError(
                expected("chat template", "a template Jinja parses", f"{type(e).__name__}: {e}")
            ) from e

        def is_block(n: Any) -> bool:
            return (
                isinstance(n, nodes.CallBlock)
                and isinstance(n.call.node, nodes.Name)
                and n.call.node.name == "_zephon_ref_owned"
            )

        def refuse(line: int, what: str) -> ConfigError:
            return ConfigError(
                expected(f"chat template line {line}", "generation blocks zephon can attribute", what)
            )

        self.blocks = 0

        def walk(n: Any, loops: tuple[str, ...], buffered: bool, inside: bool) -> None:
            if isinstance(n, (nodes.Include, nodes.Import, nodes.FromImport, nodes.Extends)):
                raise refuse(n.lineno, "include / import / extends")
            if is_block(n):
                if buffered or inside:
                    raise refuse(n.lineno, "a generation block inside a buffered block or another block")
                if not loops:
                    raise refuse(n.lineno, "a generation block outside every for loop")
                self.blocks += 1
                # innermost loop first: the owner is the nearest loop variable that is a message
                n.call.args += [nodes.Name(name, "load") for name in reversed(loops)]
                for c in n.body:
                    walk(c, loops, buffered, True)
                return
            if not inside:
                targets = (
                    [n.target]
                    if isinstance(n, (nodes.Assign, nodes.AssignBlock, nodes.For))
                    else list(n.targets)
                    if isinstance(n, nodes.With)
                    else []
                )
                for t in targets:
                    if any(
                        isinstance(x, nodes.Name) and x.name in loops for x in (t, *t.find_all(nodes.Name))
                    ):
                        raise refuse(n.lineno, "an enclosing loop variable rebound")
            buffered = (
                buffered
                or isinstance(n, (nodes.Macro, nodes.FilterBlock, nodes.AssignBlock))
                or (isinstance(n, nodes.CallBlock) and not is_block(n))
            )
            if isinstance(n, nodes.For):
                buffered = buffered or n.recursive
                owns = any(is_block(d) for s in n.body for d in (s, *s.find_all(nodes.CallBlock)))
                for c in n.iter_child_nodes():
                    body_child = any(c is s for s in n.body)
                    inner = (
                        loops + (n.target.name,)
                        if owns and body_child and isinstance(n.target, nodes.Name)
                        else loops
                    )
                    walk(c, inner, buffered, inside)
            else:
                for c in n.iter_child_nodes():
                    walk(c, loops, buffered, inside)

        self.controls = re.compile("(" + "|".join(re.escape(t) for t in _controls(ast, nodes)) + ")")
        walk(ast, (), False, False)
        if not self.blocks:
            raise ConfigError(expected("chat template", "at least one {% generation %} block", "none"))
        self.compiled = env.from_string(ast)
        self.source = template

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # a copy or a pickle (process runner, spawned DataLoader workers) compiles the text again
        return (OwnedTemplate, (self.source,))

    def render(
        self, messages: Sequence[Mapping[str, Any]], context: Mapping[str, Any]
    ) -> tuple[str, list[tuple[int, int, int]]]:
        """The text and its ``(owner, start, end)`` generation ranges, in output order."""
        msgs = [dict(m) for m in messages]
        if _STATE in context or "messages" in context:
            raise _Invalid("the render context names 'messages' or the reserved range tracker")
        for name in ("tools", "documents"):
            value = context.get(name)
            if value is not None and (
                not isinstance(value, (list, tuple)) or any(not isinstance(v, dict) for v in value)
            ):
                raise _Invalid(f"{name}: expected a list of dictionaries, received {value!r}")
        state = _Render({id(m): i for i, m in enumerate(msgs)}, msgs)
        args = {
            "tools": None,
            "documents": None,
            **context,
            "messages": msgs,
            "add_generation_prompt": False,
            _STATE: state,
        }
        pieces = []
        # the output position is the length of what was yielded before a block's call
        for piece in self.compiled.generate(**args):
            pieces.append(piece)
            state.at += len(piece)
        text = "".join(pieces)
        last = 0
        for _, a, b in state.ranges:
            if not last <= a <= b <= len(text):
                raise _Invalid("generation ranges out of order or overlapping")
            last = b
        return text, state.ranges


def _pass_context(fn: Callable[..., str]) -> Callable[..., str]:
    from jinja2 import pass_context

    return pass_context(fn)


# -- verify ---------------------------------------------------------------------------------------


def _arguments(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    if value is not None and not isinstance(value, (dict, list, int, float)):
        raise _Invalid("tool-call arguments must be JSON values or text")
    return value


def _function(call: Any) -> dict[str, Any]:
    if not isinstance(call, dict):
        raise _Invalid("tool calls must be dictionaries")
    fn = call.get("function", call)
    if not isinstance(fn, dict) or ("function" not in call and "name" not in call):
        raise _Invalid("a tool call needs a function dictionary or a name")
    return fn


def _check_fields(value: Any, key: str = "") -> None:
    """zephon's field checks on a record's messages (and a tools list): raise _Invalid."""
    if key in ("tools", "tool_calls"):
        if value is None:
            return
        if not isinstance(value, (list, tuple)):
            raise _Invalid(f"{key} must be a list or None")
        for item in value:
            if not isinstance(item, dict):
                raise _Invalid(f"{key} entries must be dictionaries")
            if key == "tool_calls":
                _arguments(_function(item).get("arguments", {}))
            elif not isinstance(item.get("function", item), dict):
                raise _Invalid("tools must hold a function dictionary")
        return
    if key in TEXT_FIELDS:
        if key == "content" and isinstance(value, list):
            for part in value:
                if (
                    not isinstance(part, dict)
                    or part.get("type") != "text"
                    or not isinstance(part.get("text", ""), (str, type(None)))
                ):
                    raise _Invalid("verification supports text-only content parts")
                for k, v in part.items():
                    _check_fields(v, k)
            return
        if value is not None and not isinstance(value, str):
            raise _Invalid(f"message {key} must be text or None")
    if isinstance(value, Mapping):
        for k, v in value.items():
            _check_fields(v, k)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _check_fields(v, key)


def _probe(
    messages: Sequence[Mapping[str, Any]], selected: set[int], controls: re.Pattern[str]
) -> tuple[list[dict[str, Any]], dict[str, int], set[str]]:
    """The messages with every text replaced by markers; marker -> owner; the required markers."""
    out = [copy.deepcopy(dict(m)) for m in messages]
    owner_of: dict[str, int] = {}
    required: set[str] = set()

    def marker(i: int) -> str:
        m = f"zephon_probe_{i}_{len(owner_of)}_text"
        owner_of[m] = i
        if i in selected:
            required.add(m)
        return m

    def mark(text: str, i: int) -> str:
        parts = controls.split(text)
        for k in range(0, len(parts), 2):  # odd indices are the controls themselves
            p = parts[k]
            if p.strip():
                parts[k] = p[: len(p) - len(p.lstrip())] + marker(i) + p[len(p.rstrip()) :]
        return "".join(parts)

    for i, m in enumerate(out):
        content = m.get("content")
        if isinstance(content, str) and content:
            m["content"] = mark(content, i)
        elif isinstance(content, list):
            for part in content:
                if not isinstance(part, dict) or part.get("type") != "text":
                    raise _Invalid("verification supports text-only content parts")
                if part.get("text"):
                    part["text"] = mark(part["text"], i)
        elif content is not None and not isinstance(content, str):
            raise _Invalid("message content must be text, text parts or None")
        for name in TEXT_FIELDS[1:]:
            if m.get(name):
                m[name] = mark(m[name], i)
        for call in m.get("tool_calls") or []:
            fn = _function(call)
            raw = fn.get("arguments", {})
            args = _arguments(raw)
            if isinstance(args, dict):
                args = {**args, "zephon_probe": marker(i)}
                fn["arguments"] = json.dumps(args) if isinstance(raw, str) else args
    return out, owner_of, required


def _judge(
    text: str,
    ranges: Sequence[tuple[int, int, int]],
    messages: Sequence[Mapping[str, Any]],
    owner_of: Mapping[str, int],
    required: set[str],
) -> list[str]:
    """The issue codes of the markers found in ``text`` against the owned ranges."""
    codes: list[str] = []
    seen: set[str] = set()
    if owner_of:
        for hit in re.finditer("|".join(re.escape(m) for m in owner_of), text):
            m = hit.group()
            seen.add(m)
            want = owner_of[m]
            a, b = hit.span()
            over = [(o, max(a, s), min(b, e)) for o, s, e in ranges if s < b and e > a]
            if (messages[want].get("role") != "assistant" and over) or any(o != want for o, _, _ in over):
                codes.append(OWNERSHIP)
            elif m in required and sum(e - s for o, s, e in over if o == want) != b - a:
                codes.append(SUPERVISION)
    codes += [CONTENT for m in required - seen]
    return codes


def _changed(before: str, after: str) -> tuple[int, int]:
    """The range of ``before`` that differs from ``after`` (common prefix and suffix removed)."""
    a = 0
    while a < min(len(before), len(after)) and before[a] == after[a]:
        a += 1
    b, c = len(before), len(after)
    while b > a and c > a and before[b - 1] == after[c - 1]:
        b, c = b - 1, c - 1
    return a, b


def _literal_arguments(
    owned: OwnedTemplate,
    probe: list[dict[str, Any]],
    context: Mapping[str, Any],
    text: str,
    ranges: Sequence[tuple[int, int, int]],
    selected: set[int],
) -> list[str]:
    """Tool calls whose arguments are not a JSON object: judged by a substituted render."""
    codes: list[str] = []
    for i, m in enumerate(probe):
        for k, call in enumerate(m.get("tool_calls") or []):
            raw = _function(call).get("arguments", {})
            if isinstance(_arguments(raw), dict):
                continue
            other = copy.deepcopy(probe)
            fn = _function(other[i]["tool_calls"][k])
            tag = f"zephon_argument_{i}_{k}_text"
            if raw == "":
                fn["name"] = tag
            else:
                sub = {"zephon_probe": tag}
                fn["arguments"] = json.dumps(sub) if isinstance(raw, str) else sub
            changed, _ = owned.render(other, context)
            if i in selected and tag not in changed:
                codes.append(INVALID)
                continue
            a, b = _changed(text, changed)
            if a == b:
                if i in selected:
                    codes.append(CONTENT)
                continue
            piece = text[a:b]
            codes += _judge(
                piece,
                [(o, s - a, e - a) for o, s, e in ranges],
                probe,
                {piece: i},
                {piece} if i in selected else set(),
            )
    return codes


def owned_mask(encoding: Any, ranges: Sequence[tuple[int, int, int]], owners: set[int]) -> np.ndarray:
    """zephon's endpoint rule: each range's first and last characters mapped to tokens; the first
    range whose start maps to no token ends the walk; a last token of None or 0 runs to the end."""
    mask = np.zeros(len(encoding["input_ids"]), dtype=np.uint8)
    for owner, a, b in ranges:
        first = encoding.char_to_token(0, a)
        last = encoding.char_to_token(0, b - 1)
        if first is None:
            break
        if owner in owners:
            mask[first : (last + 1 if last else len(mask))] = 1
    return mask


def verify(
    owned: OwnedTemplate,
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    kwargs: Mapping[str, Any],
    scope: str,
    *,
    setup: bool = False,
) -> tuple[list[str], str]:
    """The issue codes of one conversation's structure check (module docstring) and a detail line."""
    codes: list[str] = []
    try:
        _check_fields(list(messages))
        _check_fields(kwargs.get("tools"), "tools")
        selected = selected_indices(messages, scope)
        probe, owner_of, required = _probe(messages, selected, owned.controls)
        context = {**tokenizer.special_tokens_map, **kwargs}
        text, ranges = owned.render(probe, context)
        codes += _literal_arguments(owned, probe, context, text, ranges, selected)
        theirs = tokenizer.apply_chat_template(
            probe, chat_template=owned.source, tokenize=False, add_generation_prompt=False, **kwargs
        )
        if text != theirs:
            raise _Invalid("the owned render differs from the tokenizer's render")
        codes += _judge(text, ranges, probe, owner_of, required)
        every = selected_indices(probe, "all_assistant")
        for limit in (None, 8) if setup else (None,):
            cut = {} if limit is None else {"truncation": True, "max_length": limit}
            enc = tokenizer.apply_chat_template(
                probe,
                chat_template=owned.source,
                tokenize=True,
                return_dict=True,
                return_assistant_tokens_mask=True,
                add_generation_prompt=False,
                **kwargs,
                **cut,
            )
            ref = enc["assistant_masks"]
            ref = ref[0] if ref and isinstance(ref[0], list) else ref
            if owned_mask(enc, ranges, every).tolist() != [int(x) for x in ref]:
                raise _Invalid("the generated-token mask differs from the tokenizer's assistant mask")
    except Exception as e:
        # as zephon: a ValueError or a Jinja TemplateError (raise_exception, an undefined call) while
        # probing is a template error; anything else is raised
        from jinja2 import TemplateError

        if not isinstance(e, (ValueError, TemplateError)):
            raise
        codes.append(INVALID)
        return codes, f"{type(e).__name__}: {e}"
    return codes, ""


def setup_check(owned: OwnedTemplate, tokenizer: Any, kwargs: Mapping[str, Any], scope: str) -> None:
    """zephon's setup probes; any issue refuses the template (TemplateVerificationError)."""
    for roles in _SETUP_ROLES:
        codes, detail = verify(
            owned, tokenizer, [{"role": r, "content": "text"} for r in roles], kwargs, scope, setup=True
        )
        if codes:
            raise TemplateVerificationError(codes, detail, context=f"setup conversation {list(roles)}")
