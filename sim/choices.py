"""One interface for every decision the simulator makes, and its backends.

Theory of operation
-------------------
Which participant steps next, whether a fault fires, how long a write takes:
every such decision goes through a :class:`Choices` object and nowhere else.
A decision has a *label* (the kind of decision, e.g. ``"schedule"``,
``"storage/latency"``, ``"rank/3/crash"``), a number of possible outcomes
``n`` and the outcome's index in ``[0, n)``.  All three methods reduce to that:

* ``choose(label, options)``             -> ``options[index]``, ``n = len(options)``;
* ``integer(label, lo, hi)``             -> ``lo + index``, ``n = hi - lo + 1``;
* ``chance(label, numerator, denominator)`` -> ``index == 1``, ``n = 2``
  (an exact integer ratio; no floats decide anything).

Every decision with more than one outcome is appended to the backend's
``record`` as a :class:`Decision` ``(label, n, index)``.  A decision with only
one outcome (one option, ``lo == hi``, a ratio of 0 or 1) is not a decision: it
consumes no randomness and is not recorded, in every backend alike.  Index 0
is the "nothing happens" end: the first option, the lowest integer, a chance
that does not fire; Hypothesis shrinks towards it.

Backends (each a subclass of :class:`BaseChoices`, which validates, records and
maps indices to values; a backend only answers "which index?"):

* :class:`SeededChoices` -- one integer seed, *named substreams*: each label
  draws from its own ``random.Random`` seeded by
  ``zephon_ref.seeding.derive_seed(seed, "sim.choices/" + label)`` (BLAKE2b,
  never ``hash()``), using ``getrandbits`` only (the one method whose output
  Python promises across versions) with rejection sampling.  A new kind of
  decision therefore never perturbs the values drawn for another label.
* :class:`HypothesisChoices` -- draws from a Hypothesis ``data`` object
  (``st.integers(0, n - 1)``, ``st.booleans()`` for a chance), so a failing
  schedule shrinks with the rest of the test case.
* :class:`ReplayChoices` -- replays a recorded run exactly, and raises
  :class:`ReplayDivergence` (naming the position and label) the moment the run
  asks for something other than what was recorded.
* ``sim.explore.ExhaustiveChoices`` -- forces prefixes to enumerate every path.

A long seeded run can keep its record packed (``SeededChoices(seed, compact=True)``):
each decision is stored as the bytes of its JSON form (one shared object per distinct
``(label, n, index)``), blocks of them zlib-compressed, so a 2,000-step 512-lane run
holds a few bytes per decision instead of a :class:`Decision` object each.
:meth:`BaseChoices.record_json` yields the JSON text of the record
(``[[label, n, index], ...]``, compact separators) in pieces, whichever way it is kept,
so a digest of it (the world's fingerprint) is the same either way; ``record`` still
returns the decisions (decoded).

A record serialises to a compact, shell-safe string
(:func:`encode_decisions` / :func:`decode_decisions`) that goes on the one-line
reproduce command (:func:`reproduce_command`).

What may not live here: the world model, the kernel, anything about pipelines.
This module imports no Hypothesis at import time (it is a test dependency).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import shlex
import zlib
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from random import Random  # seeded instances only: never the global generator
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from zephon_ref.errors import ConfigError, ConfigTypeError, ContractError, expected
from zephon_ref.seeding import derive_seed

if TYPE_CHECKING:
    from hypothesis.strategies import DataObject

__all__ = [
    "BaseChoices",
    "Choices",
    "Decision",
    "DecisionFormatError",
    "HypothesisChoices",
    "ReplayChoices",
    "ReplayDivergence",
    "SeededChoices",
    "decode_decisions",
    "encode_decisions",
    "reproduce_command",
]

T = TypeVar("T")

_SUBSTREAM_PREFIX = "sim.choices/"
_FORMAT_PREFIX = "d1."
_CHECK_BYTES = 4


@dataclass(frozen=True, slots=True)
class Decision:
    """One recorded decision: its label, how many outcomes it had, which one was taken."""

    label: str
    n: int
    index: int


class ReplayDivergence(ContractError):
    """A replayed run asked for a decision other than the recorded one.

    ``position`` is the index in the recording; ``recorded`` is the decision
    found there (None past the end); ``label`` and ``n`` are what the run asked.
    """

    def __init__(
        self, message: str, *, position: int, recorded: Decision | None, label: str | None, n: int | None
    ) -> None:
        super().__init__(message)
        self.position = position
        self.recorded = recorded
        self.label = label
        self.n = n


class DecisionFormatError(ConfigError):
    """A decision string is not one :func:`encode_decisions` wrote (or was damaged)."""


class Choices(Protocol):
    """What the simulator asks every decision of."""

    def choose(self, label: str, options: Sequence[T]) -> T:
        """One of ``options`` (index 0 is the default Hypothesis shrinks to)."""
        ...

    def integer(self, label: str, lo: int, hi: int) -> int:
        """An integer in ``[lo, hi]`` (both ends included)."""
        ...

    def chance(self, label: str, numerator: int, denominator: int) -> bool:
        """True with probability ``numerator / denominator`` (seeded backend)."""
        ...

    def observe(self, state: Hashable) -> None:
        """Tell the backend the model's state after a step (the explorer builds its graph from it)."""
        ...

    @property
    def record(self) -> tuple[Decision, ...]:
        """Every decision taken so far, in order."""
        ...


def _check_label(label: object) -> str:
    if not isinstance(label, str) or not label:
        raise ConfigTypeError(expected("decision label", "a non-empty str", label))
    return label


def _check_int(what: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigTypeError(expected(what, "an int", value))
    return value


class BaseChoices:
    """Validation, recording and index-to-value mapping shared by every backend.

    A backend overrides :meth:`_below` (an index in ``[0, n)``, ``n >= 2``) and,
    if it treats a chance specially, :meth:`_chance` (0 or 1).
    """

    __slots__ = ("_record",)

    def __init__(self) -> None:
        self._record: list[Decision] = []

    # -- the interface ---------------------------------------------------------------

    def choose(self, label: str, options: Sequence[T]) -> T:
        _check_label(label)
        n = len(options)
        if n == 0:
            raise ConfigError(expected(f"choose({label!r})", "at least one option", options))
        if n == 1:
            return options[0]
        return options[self._decide(label, n, self._below(label, n))]

    def integer(self, label: str, lo: int, hi: int) -> int:
        _check_label(label)
        _check_int(f"integer({label!r}) lo", lo)
        _check_int(f"integer({label!r}) hi", hi)
        if hi < lo:
            raise ConfigError(expected(f"integer({label!r})", f"hi >= lo ({lo})", hi))
        if hi == lo:
            return lo
        n = hi - lo + 1
        return lo + self._decide(label, n, self._below(label, n))

    def chance(self, label: str, numerator: int, denominator: int) -> bool:
        _check_label(label)
        _check_int(f"chance({label!r}) numerator", numerator)
        _check_int(f"chance({label!r}) denominator", denominator)
        if denominator < 1 or not 0 <= numerator <= denominator:
            raise ConfigError(
                expected(
                    f"chance({label!r})",
                    "0 <= numerator <= denominator, denominator >= 1",
                    (numerator, denominator),
                )
            )
        if numerator == 0:
            return False
        if numerator == denominator:
            return True
        return self._decide(label, 2, self._chance(label, numerator, denominator)) == 1

    def observe(self, state: Hashable) -> None:
        """No-op here; the exhaustive explorer overrides it."""

    @property
    def record(self) -> tuple[Decision, ...]:
        return tuple(self._record)

    def record_json(self) -> Iterator[bytes]:
        """The record as ``json.dumps([[label, n, index], ...], separators=(",", ":"))``, in pieces."""
        yield json.dumps([[d.label, d.n, d.index] for d in self._record], separators=(",", ":")).encode()

    def encoded(self) -> str:
        """The record as a compact string (:func:`encode_decisions`)."""
        return encode_decisions(self.record)

    # -- what a backend supplies -----------------------------------------------------

    def _below(self, label: str, n: int) -> int:
        raise NotImplementedError

    def _chance(self, label: str, numerator: int, denominator: int) -> int:
        return self._below(label, 2)

    def _decide(self, label: str, n: int, index: int) -> int:
        # A backend's answer is an index of this decision; anything else is a bug in it.
        assert isinstance(index, int) and 0 <= index < n, (label, n, index)
        self._record.append(Decision(label, n, index))
        return index


class _PackedRecord:
    """A decision record kept as JSON bytes: one shared fragment per distinct decision,
    every ``BLOCK`` of them joined and zlib-compressed (see the module docstring)."""

    __slots__ = ("_blocks", "_fragments", "_pending", "count")
    BLOCK = 1 << 16

    def __init__(self) -> None:
        self._fragments: dict[tuple[str, int, int], bytes] = {}
        self._pending: list[bytes] = []
        self._blocks: list[bytes] = []
        self.count = 0

    def add(self, label: str, n: int, index: int) -> None:
        key = (label, n, index)
        frag = self._fragments.get(key)
        if frag is None:
            frag = self._fragments[key] = json.dumps([label, n, index], separators=(",", ":")).encode()
        pending = self._pending
        pending.append(frag)
        self.count += 1
        if len(pending) >= self.BLOCK:
            self._blocks.append(zlib.compress(b",".join(pending), 6))
            pending.clear()

    def json_pieces(self) -> Iterator[bytes]:
        yield b"["
        first = True
        for block in self._blocks:
            if not first:
                yield b","
            yield zlib.decompress(block)
            first = False
        if self._pending:
            if not first:
                yield b","
            yield b",".join(self._pending)
        yield b"]"

    def decisions(self) -> tuple[Decision, ...]:
        return tuple(
            Decision(label, n, index) for label, n, index in json.loads(b"".join(self.json_pieces()))
        )


class SeededChoices(BaseChoices):
    """Decisions drawn from one integer seed through one substream per label
    (``compact=True``: the record is kept packed; see the module docstring)."""

    __slots__ = ("_packed", "_streams", "seed")

    def __init__(self, seed: int, *, compact: bool = False) -> None:
        super().__init__()
        self.seed = _check_int("SeededChoices seed", seed)
        self._streams: dict[str, Random] = {}
        self._packed: _PackedRecord | None = _PackedRecord() if compact else None

    def _decide(self, label: str, n: int, index: int) -> int:
        packed = self._packed
        if packed is None:
            return super()._decide(label, n, index)
        assert isinstance(index, int) and 0 <= index < n, (label, n, index)
        packed.add(label, n, index)
        return index

    @property
    def record(self) -> tuple[Decision, ...]:
        return tuple(self._record) if self._packed is None else self._packed.decisions()

    def record_json(self) -> Iterator[bytes]:
        if self._packed is None:
            yield from super().record_json()
        else:
            yield from self._packed.json_pieces()

    def _stream(self, label: str) -> Random:
        stream = self._streams.get(label)
        if stream is None:
            stream = Random(derive_seed(self.seed, _SUBSTREAM_PREFIX + label))
            self._streams[label] = stream
        return stream

    def _raw_below(self, label: str, n: int) -> int:
        # Rejection sampling on getrandbits: exact, and stable across Python versions.
        stream = self._stream(label)
        bits = (n - 1).bit_length()
        while True:
            value = stream.getrandbits(bits)
            if value < n:
                return value

    def _below(self, label: str, n: int) -> int:
        return self._raw_below(label, n)

    def _chance(self, label: str, numerator: int, denominator: int) -> int:
        return 1 if self._raw_below(label, denominator) < numerator else 0

    def unseed(self) -> str:
        """FoundationDB's "unseed": a digest of one more draw from every substream.

        Call it at the end of a run: two runs that agree on it consumed the same
        amount of randomness from every label, a stronger determinism check
        than equal records.  Labels are visited in sorted order.
        """
        digest = hashlib.sha256(b"zephon-sim-unseed/1\n")
        for label in sorted(self._streams):
            digest.update(b"%d %s\n" % (self._streams[label].getrandbits(64), label.encode()))
        return digest.hexdigest()


class HypothesisChoices(BaseChoices):
    """Decisions drawn from a Hypothesis ``data`` object, so they shrink.

    ``choose``/``integer`` draw ``st.integers(0, n - 1)`` (shrinking towards the
    first option / lowest value); ``chance`` draws ``st.booleans()`` whatever
    the ratio (shrinking towards "does not fire"): Hypothesis is searching, not
    sampling, so a rare fault should not stay rare.  ``draw_labels=False``
    keeps the decision labels out of Hypothesis's failure printout.
    """

    __slots__ = ("_data", "_draw_labels", "_st")

    def __init__(self, data: DataObject, *, draw_labels: bool = True) -> None:
        super().__init__()
        from hypothesis import strategies

        self._data = data
        self._st: Any = strategies
        self._draw_labels = draw_labels

    def _below(self, label: str, n: int) -> int:
        value: int = self._data.draw(self._st.integers(0, n - 1), label=label if self._draw_labels else None)
        return value

    def _chance(self, label: str, numerator: int, denominator: int) -> int:
        fired: bool = self._data.draw(self._st.booleans(), label=label if self._draw_labels else None)
        return 1 if fired else 0


class ReplayChoices(BaseChoices):
    """Replays recorded decisions exactly.

    A run that asks for a different label or outcome count than the recording
    holds at that position, or asks past its end, raises
    :class:`ReplayDivergence` -- unless a ``fallback`` backend is given, in
    which case the replay switches to it for the rest of the run and
    ``diverged_at`` says where (B7: keep the recorded prefix, draw the rest).
    Call :meth:`finish` at the end of the run to check that the whole
    recording was used.
    """

    __slots__ = ("_fallback", "_position", "_recorded", "diverged_at")

    def __init__(self, decisions: Sequence[Decision] | str, *, fallback: BaseChoices | None = None) -> None:
        super().__init__()
        if isinstance(decisions, str):
            decisions = decode_decisions(decisions)
        for decision in decisions:
            if not isinstance(decision, Decision):
                raise ConfigTypeError(
                    expected("ReplayChoices decisions", "Decision values or a decision string", decision)
                )
        self._recorded: tuple[Decision, ...] = tuple(decisions)
        self._position = 0
        self._fallback = fallback
        self.diverged_at: int | None = None

    @property
    def position(self) -> int:
        """How many recorded decisions have been replayed."""
        return self._position

    def _match(self, label: str, n: int) -> int | None:
        """The recorded index, or None once the run has moved to the fallback."""
        if self.diverged_at is not None:
            return None
        position = self._position
        recorded = self._recorded[position] if position < len(self._recorded) else None
        if recorded is not None and recorded.label == label and recorded.n == n:
            self._position = position + 1
            return recorded.index
        if self._fallback is None:
            if recorded is None:
                what = f"the recording ends after {len(self._recorded)} decisions"
            else:
                what = f"recorded ({recorded.label!r}, n={recorded.n}, index={recorded.index})"
            raise ReplayDivergence(
                f"replay diverged at decision {position}: the run asked ({label!r}, n={n}), {what}",
                position=position,
                recorded=recorded,
                label=label,
                n=n,
            )
        self.diverged_at = position
        return None

    def _below(self, label: str, n: int) -> int:
        index = self._match(label, n)
        if index is None:
            assert self._fallback is not None
            return self._fallback._below(label, n)
        return index

    def _chance(self, label: str, numerator: int, denominator: int) -> int:
        index = self._match(label, 2)
        if index is None:
            assert self._fallback is not None
            return self._fallback._chance(label, numerator, denominator)
        return index

    def finish(self) -> None:
        """Raise :class:`ReplayDivergence` if the run ended before the recording did."""
        if self.diverged_at is None and self._position < len(self._recorded):
            recorded = self._recorded[self._position]
            raise ReplayDivergence(
                f"replay diverged at decision {self._position}: the run ended, recorded "
                f"({recorded.label!r}, n={recorded.n}, index={recorded.index}) and "
                f"{len(self._recorded) - self._position - 1} more",
                position=self._position,
                recorded=recorded,
                label=None,
                n=None,
            )


# -- the compact string form -------------------------------------------------------------
#
# "d1." + base64url (no padding) of:   payload + blake2b(payload, digest_size=4)
# payload = varint(label count), then each label as varint(len) + UTF-8 bytes
#           (in order of first use), then varint(decision count), then per decision
#           varint(2 * index + 1), varint(label number), varint(n - 2)   when (label, n) differs
#           from the previous decision's, else varint(2 * index).
# A schedule of steps between the same participants therefore costs about one byte each.


def _put_varint(out: bytearray, value: int) -> None:
    assert value >= 0
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return


class _Reader:
    __slots__ = ("_data", "_pos")

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def varint(self) -> int:
        value = 0
        shift = 0
        while True:
            if self._pos >= len(self._data):
                raise DecisionFormatError("decision string: truncated (a number runs past the end)")
            byte = self._data[self._pos]
            self._pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 70:
                raise DecisionFormatError("decision string: a number is too long")

    def take(self, count: int) -> bytes:
        if self._pos + count > len(self._data):
            raise DecisionFormatError("decision string: truncated (a label runs past the end)")
        chunk = self._data[self._pos : self._pos + count]
        self._pos += count
        return chunk

    def at_end(self) -> bool:
        return self._pos == len(self._data)


def encode_decisions(decisions: Sequence[Decision]) -> str:
    """A compact, shell-safe string for a decision record (``decode_decisions`` reverses it)."""
    labels: dict[str, int] = {}
    body = bytearray()
    previous: tuple[int, int] | None = None
    for decision in decisions:
        if not isinstance(decision, Decision) or decision.n < 2 or not 0 <= decision.index < decision.n:
            raise ConfigError(
                expected("encode_decisions", "Decision values with n >= 2 and 0 <= index < n", decision)
            )
        number = labels.setdefault(decision.label, len(labels))
        kind = (number, decision.n)
        if kind == previous:
            _put_varint(body, 2 * decision.index)
        else:
            _put_varint(body, 2 * decision.index + 1)
            _put_varint(body, number)
            _put_varint(body, decision.n - 2)
            previous = kind
    payload = bytearray()
    _put_varint(payload, len(labels))
    for label in labels:  # dict order is first use
        raw = label.encode()
        _put_varint(payload, len(raw))
        payload += raw
    _put_varint(payload, len(decisions))
    payload += body
    check = hashlib.blake2b(bytes(payload), digest_size=_CHECK_BYTES).digest()
    return _FORMAT_PREFIX + base64.urlsafe_b64encode(bytes(payload) + check).decode("ascii").rstrip("=")


def decode_decisions(text: str) -> tuple[Decision, ...]:
    """The decision record an :func:`encode_decisions` string holds.

    Raises :class:`DecisionFormatError` for anything else (a wrong prefix, a
    damaged or truncated string, an index out of range).
    """
    if not isinstance(text, str):
        raise ConfigTypeError(expected("decode_decisions", "a str", text))
    if not text.startswith(_FORMAT_PREFIX):
        raise DecisionFormatError(
            expected("decision string", f"a string starting {_FORMAT_PREFIX!r}", text[:16])
        )
    body = text[len(_FORMAT_PREFIX) :]
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    except (binascii.Error, ValueError) as exc:
        raise DecisionFormatError(f"decision string: not base64url ({exc})") from None
    if (
        len(raw) < _CHECK_BYTES
        or hashlib.blake2b(raw[:-_CHECK_BYTES], digest_size=_CHECK_BYTES).digest() != raw[-_CHECK_BYTES:]
    ):
        raise DecisionFormatError("decision string: checksum mismatch (the string is damaged or truncated)")
    reader = _Reader(raw[:-_CHECK_BYTES])
    labels: list[str] = []
    for _ in range(reader.varint()):
        try:
            labels.append(reader.take(reader.varint()).decode())
        except UnicodeDecodeError:
            raise DecisionFormatError("decision string: a label is not UTF-8") from None
    decisions: list[Decision] = []
    kind: tuple[str, int] | None = None
    for position in range(reader.varint()):
        head = reader.varint()
        if head & 1:
            number = reader.varint()
            if number >= len(labels):
                raise DecisionFormatError(
                    expected(f"decision {position} label number", f"< {len(labels)}", number)
                )
            kind = (labels[number], reader.varint() + 2)
        if kind is None:
            raise DecisionFormatError(
                f"decision string: decision {position} repeats a kind before any was given"
            )
        index = head >> 1
        if index >= kind[1]:
            raise DecisionFormatError(expected(f"decision {position} index", f"< n ({kind[1]})", index))
        decisions.append(Decision(kind[0], kind[1], index))
    if not reader.at_end():
        raise DecisionFormatError("decision string: trailing bytes after the last decision")
    return tuple(decisions)


def reproduce_command(seed: int | None, decisions: str | None, **config: int | str | bool) -> str:
    """The one-line command that reproduces a run: ``python -m sim run --seed N ...``.

    ``decisions`` is an :func:`encode_decisions` string (a Hypothesis- or
    explorer-found run, or a minimised one); ``config`` holds the derived knobs
    and the git SHA, printed as ``--key value`` in sorted key order with
    underscores turned into dashes.  Values are ints, strs or bools (no
    floats: they do not round-trip exactly).  Every part is shell-quoted.

    The ``python -m sim`` command-line interface itself comes later (with
    ``sim/run.py``); this helper fixes its argument format now so every
    failure message already prints the line.
    """
    if seed is None and decisions is None:
        raise ConfigError("reproduce_command: expected a seed, a decision string or both, received neither")
    parts = ["python", "-m", "sim", "run"]
    if seed is not None:
        parts += ["--seed", str(_check_int("reproduce_command seed", seed))]
    if decisions is not None:
        if not isinstance(decisions, str):
            raise ConfigTypeError(
                expected("reproduce_command decisions", "an encoded decision string", decisions)
            )
        parts += ["--decisions", decisions]
    for key in sorted(config):
        value = config[key]
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (int, str)):
            text = str(value)
        else:
            raise ConfigTypeError(expected(f"reproduce_command {key}", "an int, str or bool", value))
        parts += ["--" + key.replace("_", "-"), text]
    return " ".join(shlex.quote(part) for part in parts)
