"""Hugging Face tokenizers loaded from a local directory (the ``hf`` extra), for the facade.

Theory of operation
-------------------
``tokenize(tokenizer_id=...)`` and ``tokenize_chat(tokenizer_id=...)`` name a tokenizer the
operator loads itself.  zephon_ref reads them from disk only: :func:`load_tokenizer` accepts a
directory holding a saved tokenizer (``tokenizer.json`` / ``tokenizer_config.json``, as
``save_pretrained`` writes) and calls ``transformers.AutoTokenizer.from_pretrained`` with
``local_files_only=True``, so nothing is ever downloaded; a hub id or cloud URI is refused
with a ConfigError naming what was expected.  ``None`` and ``"__fallback__"`` are the built-in
tokenizer and never reach here.  The operators themselves (semantics) take the loaded object.

What may not live here: tokenization (the operators'), caches of loaded tokenizers.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from zephon_ref.errors import ConfigError, ConfigTypeError, expected

__all__ = ["hf_available", "load_tokenizer", "read_template"]


def hf_available() -> bool:
    """True when ``transformers`` imports (the ``hf`` extra)."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


def load_tokenizer(tokenizer_id: Any, *, use_fast: bool | None = True, eos_token: str | None = None) -> Any:
    """The tokenizer saved in the local directory ``tokenizer_id`` (see the module docstring)."""
    if not isinstance(tokenizer_id, (str, os.PathLike)):
        raise ConfigTypeError(
            expected("tokenizer_id", "a local tokenizer directory (str or path)", tokenizer_id)
        )
    path = Path(tokenizer_id)
    if not path.is_dir():
        raise ConfigError(
            expected(
                "tokenizer_id",
                "a local directory holding a saved tokenizer (zephon_ref "
                "downloads nothing: save_pretrained() it first)",
                str(tokenizer_id),
            )
        )
    if not any((path / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        raise ConfigError(
            expected(
                "tokenizer_id",
                "a directory with tokenizer.json or tokenizer_config.json",
                f"{tokenizer_id} ({sorted(p.name for p in path.iterdir())[:8]})",
            )
        )
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise ConfigError(
            expected(
                "tokenizer_id", "transformers installed (pip install 'zephon_ref[hf]')", "no transformers"
            )
        ) from exc
    kwargs: dict[str, Any] = {"local_files_only": True}
    if use_fast is not None:
        kwargs["use_fast"] = use_fast
    if eos_token is not None:
        kwargs["eos_token"] = eos_token
    return AutoTokenizer.from_pretrained(str(path), **kwargs)


def read_template(template: Any) -> str | None:
    """``chat_template`` as zephon reads it: a path-like or the name of an existing file is read
    (UTF-8); any other str is template text; None stays None."""
    if template is None:
        return None
    if isinstance(template, os.PathLike):
        return Path(template).read_text(encoding="utf-8")
    if not isinstance(template, str):
        raise ConfigTypeError(expected("chat_template", "template text, a file path or None", template))
    try:
        is_file = os.path.isfile(template)
    except (OSError, ValueError):
        is_file = False
    return Path(template).read_text(encoding="utf-8") if is_file else template
