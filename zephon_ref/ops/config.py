"""``zephon.ops.config``: the string literals operator knobs take, with zephon 0.2.0's values.

Type aliases only (``typing.get_args`` gives the accepted strings, in zephon's order); the
operators check their knobs themselves (:mod:`zephon_ref.ops.knobs`).  Some values name operator
modes zephon_ref refuses (docs/divergences.md): the literal lists what zephon accepts.
"""

from typing import Literal, TypeAlias

__all__ = ["LossScope", "MissingFieldMode", "PackingAlgorithm", "SpanSource", "SpecialTokensMode"]

#: tokenize_chat: which assistant turns carry the loss
LossScope: TypeAlias = Literal["all_assistant", "last_span", "after_last_user"]
#: what a missing input field means: an error, or an empty value
MissingFieldMode: TypeAlias = Literal["error", "empty"]
#: pack_sequences / pack_flat algorithms
PackingAlgorithm: TypeAlias = Literal["first_fit", "best_fit", "wrap", "best_fit_wrap"]
#: tokenize_chat: how assistant spans are found
SpanSource: TypeAlias = Literal["auto", "generation_tags", "prefix_diff"]
#: tokenize: which special tokens are added
SpecialTokensMode: TypeAlias = Literal["bos_eos", "bos", "eos", "none", "tokenizer_default"]
