"""The durable checkpoint store: generations of immutable files in one directory.

Theory of operation
-------------------
This module owns files.  A *generation* is a set of immutable files:

* one universal shard ``g<gen>.universal.<sha256>.shard`` and one shard per lane
  ``g<gen>.lane-<ordinal>.<sha256>.shard`` (msgpack + zstd, see codec.py), each
  carrying a header (kind, lane ordinal, capture_id, schema digest);
* one manifest ``manifest-g<gen>.json`` (schema.py) naming every shard by digest
  and logical identity.  File names are derived from identity; the manifest
  holds no rank, host or path, so a moved directory still loads.

**Publication.**  Every file goes through :func:`storage.publish`, the one
shared routine for durable writes, over a :class:`~zephon_ref.storage.Storage`
(POSIX by default; tests and the simulator pass a faulty one as ``storage=``):
write a temp file in the same directory, fsync, close, seal read-only, link it
to its final name (never replacing), remove the temp, fsync the directory.
:func:`save` publishes the shards first and the manifest *last*; a generation
exists exactly when its manifest does.  A save that fails (or is killed) before
the manifest link leaves only invisible leftovers and the previous generation
loadable; it raises, so it never reports success.  A failure *after* the
manifest link (the directory fsync) also raises, but leaves that whole
generation in place: once visible, a generation is never modified (only
:func:`gc` removes old ones).  Every operating-system failure surfaces as a
:class:`~zephon_ref.storage.errors.StorageError` with a ``reason``.

**Concurrent savers.**  A save picks the generation above every number any file
mentions.  If another saver takes that number first (its shard or manifest
name is already linked), this save removes the shards it published and tries
the next free number, up to ``max_attempts`` times; then it raises
:class:`PublishConflict` (``reason="generation-race"``).  Before linking its
manifest a save also checks that no newer manifest exists (else it retries
above it), so published generations keep the order of their publication and
:func:`gc`'s rule below holds for a live saver.

**Garbage collection** (:func:`gc`): keeps the ``keep`` newest published
generations and removes, below the newest published generation N only:
manifests of older generations (each manifest before its shards, so a
generation vanishes from listings first), shards of generations < N that no
kept manifest names (torn or lost-race saves), and temp files whose target
generation is < N.  Nothing of generation >= N is ever touched: a live saver's
files all carry a generation > N at the time it chose it, and it retries above
any newer manifest before publishing.  A reader that had already read the
manifest of a collected generation gets :class:`CheckpointNotFound`
(``reason="generation-collected"``), never wrong data.

**Object storage.**  Every function taking a directory also takes an
``s3://bucket/prefix`` URL (:mod:`zephon_ref.storage.s3`): the same layout
as object keys under the prefix, published with conditional writes (a
published key is never replaced), so every rule above holds unchanged; there
are no temp files there.

**Restore.**  :func:`load` validates everything before it returns anything:
manifest self-digest and canonical form, format and schema version, expected
fingerprint and canonical_replicas, the generation floor (reset cursor), then
every shard's presence, size, sha256, header (lane and capture) and content.
Refusals raise a typed error with a ``reason`` code; a refused load writes
nothing (files are only ever opened for reading here).

**Why the newest corrupt generation is refused, not skipped.**  Silently
falling back to an older generation would resume a run from a state the caller
did not ask for: the data already delivered after that older capture would be
delivered twice, and nobody would know.  Corruption of a *published* generation
is an incident that needs a decision (repair, or an explicit
``load(dir, generation=older)``).  A *torn* generation, one whose manifest was
never linked, was never published and is invisible; that is the only case crash
recovery must handle silently, and :func:`latest_complete_generation` handles it.

What may not live here: encoding details (codec.py), schema knowledge
(schema.py), clocks, ranks, hosts, global random state.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zephon_ref import codec
from zephon_ref.checkpoint.schema import (
    FORMAT_VERSION,
    Manifest,
    ShardEntry,
    capture_id,
    capture_of,
    decode_manifest,
    encode_manifest,
    join_state,
    manifest_file_name,
    parse_generation,
    schema_digest,
    sha256_hex,
    split_state,
    validate_state,
)
from zephon_ref.codec import Codec
from zephon_ref.errors import ConfigError, StateFormatError, StateMismatchError, expected
from zephon_ref.narrow import narrowed
from zephon_ref.storage import Storage
from zephon_ref.storage import base as _st
from zephon_ref.storage.errors import (
    CheckpointCorrupt,
    CheckpointNotFound,
    CheckpointRefused,
    PublishConflict,
    StorageError,
)
from zephon_ref.storage.posix import PosixStorage

__all__ = [
    "CheckpointReader",
    "GcReport",
    "LoadedCheckpoint",
    "default_storage",
    "gc",
    "latest_complete_generation",
    "list_generations",
    "load",
    "load_checkpoint",
    "publish_bytes",
    "read_manifest",
    "save",
    "verify_generation",
]

PathLike = str | os.PathLike[str]

_POSIX = PosixStorage()
DEFAULT_MAX_ATTEMPTS = 16


def default_storage() -> Storage:
    """The storage used when none is passed: the POSIX filesystem."""
    return _POSIX


def _storage(storage: Storage | None) -> Storage:
    return _POSIX if storage is None else storage


def _at(directory: PathLike, storage: Storage | None) -> tuple[Storage, Path]:
    """The storage and root path for a directory argument: a local path, or an
    ``s3://bucket/prefix`` URL (object storage, :mod:`zephon_ref.storage.s3`;
    ``storage=`` then overrides the process's shared client for that bucket)."""
    if isinstance(directory, str) and "://" in directory:
        from zephon_ref.storage import s3

        loc = s3.location(directory)  # ConfigError for any other scheme or a malformed URL
        return (s3.storage_for(loc.bucket) if storage is None else storage), loc.root
    return _storage(storage), Path(directory)


def publish_bytes(path: PathLike, data: bytes, *, storage: Storage | None = None) -> None:
    """Durably publish ``data`` at ``path``; never replace an existing file.

    See :func:`zephon_ref.storage.publish`.  Raises
    :class:`PublishConflict` if ``path`` exists, :class:`StorageError` for any
    operating-system failure; the temp file is removed either way.
    """
    st, target = _at(path, storage)
    _st.publish(st, target, data)


# ---------------------------------------------------------------- listing


def _names(storage: Storage, directory: Path) -> list[str]:
    return _st.list_names(storage, directory)


def _manifest_generations(names: list[str]) -> list[int]:
    gens = []
    for name in names:
        parsed = parse_generation(name)
        if parsed is not None and parsed[0] == "manifest":
            gens.append(parsed[1])
    return sorted(gens)


def list_generations(directory: PathLike, *, storage: Storage | None = None) -> list[int]:
    """Generations with a published manifest, ascending (content not checked)."""
    st, root = _at(directory, storage)
    return _manifest_generations(_names(st, root))


def latest_complete_generation(directory: PathLike, *, storage: Storage | None = None) -> int | None:
    """The newest *published* generation, or None.

    A generation is published exactly when its manifest was linked into place,
    so torn saves (temp files, orphan shards) are invisible here.  The content is
    not checked: :func:`load` refuses a published generation that is corrupt
    rather than falling back (see the module docstring).
    """
    gens = list_generations(directory, storage=storage)
    return gens[-1] if gens else None


def _next_generation(names: list[str]) -> int:
    # Above every generation number any file mentions, orphans and temp files
    # included, so a torn generation's leftovers never share a number with a new
    # one (and gc's "older than the newest published" covers them).
    top = 0
    for name in names:
        target = _st.temp_target(name)
        parsed = parse_generation(name if target is None else target)
        if parsed is not None:
            top = max(top, parsed[1])
    return top + 1


# ---------------------------------------------------------------- save


def _shard_bytes(kind: str, lane: int | None, cap_id: str, schema: str, data: Any,
                 *, codec: Codec = codec) -> bytes:
    return codec.encode(
        {"kind": kind, "lane": lane, "capture_id": cap_id, "schema_digest": schema, "data": data}
    )


class _LostRace(Exception):
    """Internal: another saver took this generation number (or a newer one)."""


def save(
    state: Mapping[str, Any],
    directory: PathLike,
    *,
    fingerprint: str | None = None,
    storage: Storage | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    codec: Codec = codec,
) -> int:
    """Durably save ``state`` as a new generation in ``directory``; return its number.

    ``fingerprint`` (or ``state["fingerprint"]``) names the pipeline the state
    belongs to; both may be given only if equal.  The directory is created if
    needed.  A save that loses a race for a generation number to a concurrent
    saver retries with the next free one, at most ``max_attempts`` times in all
    (then :class:`PublishConflict`, ``reason="generation-race"``).  On any other
    failure the new generation is not published, the shards this call
    published are removed (best effort), and the error is raised
    (:class:`StorageError` for operating-system failures).  ``codec`` encodes the
    shards: the plain :mod:`zephon_ref.codec` unless a caller plugs in one of the same
    bytes (:class:`zephon_ref.fast.codec.FastCodec`; bench_checkpoint_store does).
    """
    if type(max_attempts) is not int or max_attempts < 1:
        raise ConfigError(expected("max_attempts", "an int >= 1", max_attempts))
    if not (callable(getattr(codec, "pack", None)) and callable(getattr(codec, "encode", None))):
        raise ConfigError(expected("codec", "an object with pack and encode (zephon_ref.codec)", codec))
    # Validate and encode everything that does not depend on the generation first.
    version, c, fp = validate_state(state, fingerprint=fingerprint)
    universal, lanes = split_state(state)
    # Encoding validates leaves (finite floats, known types) before any file exists.
    codec.pack(universal)
    for sl in lanes.values():
        codec.pack(sl)
    schema = schema_digest(version)
    capture = capture_of(state)

    st, root = _at(directory, storage)
    _st.ensure_dir(st, root)
    lost: list[int] = []
    for _ in range(max_attempts):
        generation = _next_generation(_names(st, root))
        cap_id = capture_id(
            generation=generation, fingerprint=fp, canonical_replicas=c, capture=capture, schema=schema
        )
        files: list[tuple[ShardEntry, bytes]] = []
        ub = _shard_bytes("universal", None, cap_id, schema, universal, codec=codec)
        files.append((ShardEntry(lane=None, digest=sha256_hex(ub), size=len(ub)), ub))
        for lane, sl in lanes.items():
            lb = _shard_bytes("lane", lane, cap_id, schema, sl, codec=codec)
            files.append((ShardEntry(lane=lane, digest=sha256_hex(lb), size=len(lb)), lb))
        manifest = Manifest(
            format_version=FORMAT_VERSION,
            generation=generation,
            engine_version=version,
            schema_digest=schema,
            fingerprint=fp,
            canonical_replicas=c,
            capture=capture,
            capture_id=cap_id,
            universal=files[0][0],
            lanes=tuple(e for e, _ in files[1:]),
        )
        try:
            _publish_generation(st, root, generation, files, encode_manifest(manifest))
        except _LostRace:
            lost.append(generation)
            continue
        return generation
    raise PublishConflict(
        expected(
            f"a free generation number in {root}",
            f"one within {max_attempts} attempts",
            f"every attempt lost to a concurrent saver (generations {lost})",
        ),
        reason="generation-race",
    )


def _publish_generation(
    st: Storage, root: Path, generation: int, files: list[tuple[ShardEntry, bytes]], manifest_bytes: bytes
) -> None:
    published: list[Path] = []
    manifest_path = root / manifest_file_name(generation)
    manifest_linked = False  # our own link, not a concurrent saver's identical manifest
    try:
        for entry, data in files:
            target = root / entry.file_name(generation)
            try:
                _st.publish(st, target, data)
            except StorageError as exc:
                if exc.op in _st.AFTER_LINK_OPS:  # linked before failing: ours to remove
                    published.append(target)
                raise
            published.append(target)
        # A newer manifest means a concurrent saver published above us: publish
        # above it instead (publication order = generation order; gc relies on it).
        if any(g >= generation for g in list_generations(root, storage=st)):
            raise _LostRace()
        try:
            _st.publish(st, manifest_path, manifest_bytes)
        except StorageError as exc:
            manifest_linked = exc.op in _st.AFTER_LINK_OPS
            raise
    except BaseException as exc:
        # If our manifest got linked before the failure (e.g. the directory fsync
        # failed), the generation is visible and whole: never touch it.  The
        # caller still gets the error, so it never reports success.  (Comparing the
        # file's bytes would not do: a concurrent saver of an identical state
        # publishes identical bytes under the same name.)
        if not manifest_linked:
            for p in published:  # unreferenced: no manifest names them
                with contextlib.suppress(OSError):
                    _st.remove_file(st, p)
            if isinstance(exc, PublishConflict):
                raise _LostRace() from exc
        raise


# ---------------------------------------------------------------- load


@dataclass(frozen=True, slots=True)
class LoadedCheckpoint:
    """A fully validated generation: its manifest and the reassembled state."""

    generation: int
    manifest: Manifest
    state: dict[str, Any]


def read_manifest(directory: PathLike, generation: int, *, storage: Storage | None = None) -> Manifest:
    """Read and validate the manifest of ``generation`` (shards not checked)."""
    st, root = _at(directory, storage)
    data = _st.read_bytes(st, root / manifest_file_name(generation))
    if data is None:
        raise CheckpointNotFound(
            expected(f"manifest of generation {generation} in {root}", "a published file", "nothing"),
            reason="missing-manifest",
        )
    m = decode_manifest(data)
    if m.generation != generation:
        raise CheckpointCorrupt(
            expected("manifest generation", str(generation), m.generation), reason="manifest-generation"
        )
    return m


def _check_manifest(
    m: Manifest,
    *,
    expected_fingerprint: str | None,
    expected_canonical_replicas: int | None,
    min_generation: int,
) -> None:
    if m.generation < min_generation:
        raise CheckpointRefused(
            expected(
                "checkpoint generation (reset cursor)",
                f">= {min_generation}, the newest already restored or required",
                m.generation,
            ),
            reason="stale-generation",
        )
    if expected_fingerprint is not None and m.fingerprint != expected_fingerprint:
        raise CheckpointRefused(
            expected("checkpoint fingerprint (another pipeline?)", repr(expected_fingerprint), m.fingerprint),
            reason="fingerprint",
        )
    if expected_canonical_replicas is not None and m.canonical_replicas != expected_canonical_replicas:
        raise CheckpointRefused(
            expected(
                "checkpoint canonical_replicas (migration required)",
                str(expected_canonical_replicas),
                m.canonical_replicas,
            ),
            reason="canonical-replicas",
        )


def _read_shard(st: Storage, root: Path, m: Manifest, entry: ShardEntry) -> Any:
    name = entry.file_name(m.generation)
    data = _st.read_bytes(st, root / name)
    if data is None and _st.read_bytes(st, root / manifest_file_name(m.generation)) is None:
        # The manifest we read is gone too: gc collected this generation mid-read.
        raise CheckpointNotFound(
            expected(
                f"generation {m.generation} in {root}",
                "its manifest and shards until the load finished",
                "the generation removed while it was being read (gc)",
            ),
            reason="generation-collected",
        )
    if data is None:
        raise CheckpointCorrupt(
            expected(f"{entry.role} shard of generation {m.generation}", f"file {name}", "no such file"),
            reason="missing-shard",
        )
    if len(data) != entry.size:
        raise CheckpointCorrupt(
            expected(f"size of {entry.role} shard {name}", f"{entry.size} bytes", len(data)),
            reason="truncated" if len(data) < entry.size else "size-mismatch",
        )
    got = sha256_hex(data)
    if got != entry.digest:
        raise CheckpointCorrupt(
            expected(f"sha256 of {entry.role} shard {name}", entry.digest, got), reason="digest-mismatch"
        )
    try:
        obj = codec.decode(data)
    except StateFormatError as exc:
        raise CheckpointCorrupt(f"{entry.role} shard {name}: {exc}", reason="shard-malformed") from exc
    kind = "universal" if entry.lane is None else "lane"
    if not isinstance(obj, dict) or set(obj) != {"kind", "lane", "capture_id", "schema_digest", "data"}:
        raise CheckpointCorrupt(
            expected(f"header of shard {name}", "{kind, lane, capture_id, schema_digest, data}", obj),
            reason="shard-malformed",
        )
    if obj["kind"] != kind or obj["lane"] != entry.lane:
        raise CheckpointCorrupt(
            expected(f"identity of shard {name}", f"{kind} lane {entry.lane}", (obj["kind"], obj["lane"])),
            reason="shard-identity",
        )
    if obj["schema_digest"] != m.schema_digest:
        raise CheckpointRefused(
            expected(f"schema of shard {name}", m.schema_digest, obj["schema_digest"]),
            reason="schema-mismatch",
        )
    if obj["capture_id"] != m.capture_id:
        raise CheckpointRefused(
            expected(
                f"capture of shard {name} (a shard of another capture)", m.capture_id, obj["capture_id"]
            ),
            reason="capture-mismatch",
        )
    if not isinstance(obj["data"], dict):
        raise CheckpointCorrupt(
            expected(f"data of shard {name}", "a map", type(obj["data"]).__name__), reason="shard-malformed"
        )
    return obj["data"]


def _assemble(st: Storage, root: Path, m: Manifest) -> dict[str, Any]:
    universal = _read_shard(st, root, m, m.universal)
    lanes = {e.lane: _read_shard(st, root, m, e) for e in m.lanes}
    state = join_state(universal, lanes)  # type: ignore[arg-type]
    # Cross-check the assembled state against what the manifest says it captured.
    try:
        version, c, fp = validate_state(state)
    except (StateFormatError, StateMismatchError) as exc:  # a lane's entries missing: a mismatch
        raise CheckpointCorrupt(f"generation {m.generation}: {exc}", reason="state-malformed") from exc
    # The fingerprint may have come from the save() keyword, so the state need not carry it.
    facts = (version, c, m.fingerprint if fp is None else fp, capture_of(state))
    want = (m.engine_version, m.canonical_replicas, m.fingerprint, m.capture)
    if facts != want:
        raise CheckpointRefused(
            expected(
                f"assembled state of generation {m.generation}", f"the manifest's capture {want}", facts
            ),
            reason="capture-mismatch",
        )
    return state


def load_checkpoint(
    directory: PathLike,
    generation: int | None = None,
    *,
    expected_fingerprint: str | None = None,
    expected_canonical_replicas: int | None = None,
    min_generation: int = 0,
    storage: Storage | None = None,
) -> LoadedCheckpoint:
    """Validate a whole generation (newest published if None) and return it."""
    if type(min_generation) is not int or min_generation < 0:
        raise ConfigError(expected("min_generation", "an int >= 0", min_generation))
    st, root = _at(directory, storage)
    if generation is None:
        gen = latest_complete_generation(root, storage=st)
        if gen is None:
            raise CheckpointNotFound(
                expected(f"checkpoint directory {root}", "at least one published generation", "none"),
            )
    else:
        if type(generation) is not int or generation < 1:
            raise ConfigError(expected("generation", "an int >= 1 or None", generation))
        gen = generation
    m = read_manifest(root, gen, storage=st)
    _check_manifest(
        m,
        expected_fingerprint=expected_fingerprint,
        expected_canonical_replicas=expected_canonical_replicas,
        min_generation=min_generation,
    )
    return LoadedCheckpoint(generation=gen, manifest=m, state=_assemble(st, root, m))


load = narrowed(
    load_checkpoint,
    lambda loaded: loaded.state,
    name="load",
    returns="dict[str, Any]",
    doc="The state dict of a validated generation; see :func:`load_checkpoint`.",
)


def verify_generation(directory: PathLike, generation: int, *, storage: Storage | None = None) -> Manifest:
    """Check every digest and header of one generation; return its manifest or raise."""
    return load_checkpoint(directory, generation, storage=storage).manifest


def iter_verify(
    directory: PathLike, *, storage: Storage | None = None
) -> Iterator[tuple[int, Manifest | Exception]]:
    """(generation, manifest or the error that refused it) for every published generation."""
    for gen in list_generations(directory, storage=storage):
        try:
            yield gen, verify_generation(directory, gen, storage=storage)
        except (CheckpointCorrupt, CheckpointRefused, CheckpointNotFound, StorageError) as exc:
            yield gen, exc


class CheckpointReader:
    """Loads generations from one directory and refuses to go backwards.

    It remembers the highest generation it restored; a later request for an
    older one is a *reset cursor* and raises :class:`CheckpointRefused`.  The
    same generation may be loaded again.  It is the single owner of that floor.
    """

    __slots__ = ("_directory", "_fingerprint", "_replicas", "_floor", "_storage", "highest_restored")

    def __init__(
        self,
        directory: PathLike,
        *,
        expected_fingerprint: str | None = None,
        expected_canonical_replicas: int | None = None,
        min_generation: int = 0,
        storage: Storage | None = None,
    ) -> None:
        if type(min_generation) is not int or min_generation < 0:
            raise ConfigError(expected("min_generation", "an int >= 0", min_generation))
        _at(directory, storage)  # a malformed URL is refused here, not at the first load
        self._directory: PathLike = (
            directory if isinstance(directory, str) and "://" in directory else Path(directory)
        )
        self._fingerprint = expected_fingerprint
        self._replicas = expected_canonical_replicas
        self._floor = min_generation
        self._storage = storage
        self.highest_restored: int | None = None

    def load(self, generation: int | None = None) -> dict[str, Any]:
        floor = max(self._floor, self.highest_restored or 0)
        loaded = load_checkpoint(
            self._directory,
            generation,
            expected_fingerprint=self._fingerprint,
            expected_canonical_replicas=self._replicas,
            min_generation=floor,
            storage=self._storage,
        )
        # Mutate last: only a fully validated load moves the floor.
        self.highest_restored = loaded.generation
        return loaded.state


# ---------------------------------------------------------------- gc


@dataclass(frozen=True, slots=True)
class GcReport:
    """What :func:`gc` found and removed (file counts are of this directory's names)."""

    kept: tuple[int, ...]
    removed_generations: tuple[int, ...]
    removed_shards: int
    removed_temps: int
    files_before: int
    files_after: int


def gc(directory: PathLike, *, keep: int, storage: Storage | None = None) -> GcReport:
    """Keep the ``keep`` newest published generations; remove older ones and torn leftovers.

    The rule (see the module docstring): with N the newest published
    generation, remove manifests of published generations older than the
    ``keep`` newest (manifest first), every shard of a generation < N that no
    kept manifest names, and every temp file whose target generation is < N.
    Nothing of generation >= N, no foreign file, and nothing at all when no
    generation is published.  A kept manifest that cannot be read keeps every
    shard of its generation.  Safe while readers load (they get a typed
    refusal for a collected generation) and while a saver runs.
    """
    if type(keep) is not int or keep < 1:
        raise ConfigError(expected("gc keep", "an int >= 1 (the newest generation is always kept)", keep))
    st, root = _at(directory, storage)
    names = _names(st, root)
    gens = _manifest_generations(names)
    if not gens:
        return GcReport((), (), 0, 0, len(names), len(names))
    newest = gens[-1]
    kept = tuple(gens[-keep:])
    doomed = tuple(g for g in gens if g not in kept)
    named: set[str] = set()
    unreadable: set[int] = set()
    for g in kept:
        if g == newest:
            continue  # nothing of generation N is touched, so its names need not be known
        try:
            m = read_manifest(root, g, storage=st)
        except (CheckpointCorrupt, CheckpointNotFound, StorageError):
            unreadable.add(g)
            continue
        named.update(e.file_name(g) for e in m.shards)
    # Manifests first: a collected generation leaves the listing before its shards go.
    for g in doomed:
        _st.remove_file(st, root / manifest_file_name(g))
    removed_shards = removed_temps = 0
    for name in names:
        parsed = parse_generation(name)
        if parsed is not None and parsed[0] == "shard":
            g = parsed[1]
            # Precondition: g < N, and its generation is collected or does not name it.
            if g < newest and g not in unreadable and name not in named:
                removed_shards += _st.remove_file(st, root / name)
            continue
        target = _st.temp_target(name)
        parsed = parse_generation(target) if target is not None else None
        if parsed is not None and parsed[1] < newest:
            removed_temps += _st.remove_file(st, root / name)
    if doomed or removed_shards or removed_temps:
        _st.sync_dir(st, root)
    return GcReport(
        kept=kept,
        removed_generations=doomed,
        removed_shards=removed_shards,
        removed_temps=removed_temps,
        files_before=len(names),
        files_after=len(_names(st, root)),
    )
