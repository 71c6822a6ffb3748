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

**Publication.**  Every file goes through :func:`publish_bytes`, the one shared
routine for durable writes: write a temp file in the same directory, fsync,
close, ``os.link`` it to its final name (fails if the name exists: a published
file is never replaced), unlink the temp, fsync the directory.  :func:`save`
publishes the shards first and the manifest *last*; a generation exists exactly
when its manifest does.  A save that fails (or is killed) before the manifest
link leaves only invisible leftovers and the previous generation loadable; it
raises, so it never reports success.  A failure *after* the manifest link (the
directory fsync) also raises, but leaves that whole generation in place: once
visible, a generation is never modified or removed.  Files are made read-only once published.

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

The :data:`publish_hook` is the one fault-injection point: tests and the
simulator set it to observe or interrupt each publish step.

What may not live here: encoding details (codec.py), schema knowledge
(schema.py), clocks, ranks, hosts, global random state.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import stat
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zephon_ref.checkpoint import codec
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
from zephon_ref.errors import (
    CheckpointCorrupt,
    CheckpointNotFound,
    CheckpointRefused,
    ConfigError,
    PublishConflict,
    StateFormatError,
    expected,
)

__all__ = [
    "PUBLISH_STEPS",
    "CheckpointReader",
    "LoadedCheckpoint",
    "latest_complete_generation",
    "list_generations",
    "load",
    "load_checkpoint",
    "publish_bytes",
    "publish_hook",
    "read_manifest",
    "save",
    "set_publish_hook",
    "verify_generation",
]

PathLike = str | os.PathLike[str]

# The steps of publish_bytes, in order; the hook is called after each one.
PUBLISH_STEPS: tuple[str, ...] = ("opened", "written", "synced", "closed", "linked", "unlinked", "dir-synced")

publish_hook: Callable[[str, Path], None] | None = None
_tmp_counter = itertools.count()


def set_publish_hook(hook: Callable[[str, Path], None] | None) -> Callable[[str, Path], None] | None:
    """Install ``hook(step, final_path)`` (or None); return the previous hook."""
    global publish_hook
    prev, publish_hook = publish_hook, hook
    return prev


def _step(name: str, path: Path) -> None:
    hook = publish_hook
    if hook is not None:
        hook(name, path)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish_bytes(path: PathLike, data: bytes) -> None:
    """Durably publish ``data`` at ``path``; never replace an existing file.

    write temp -> fsync -> close -> link (NOREPLACE) -> unlink temp -> fsync dir.
    Raises :class:`PublishConflict` if ``path`` exists (the temp is removed);
    any other failure removes the temp (best effort) and re-raises.
    """
    final = Path(path)
    directory = final.parent
    tmp = directory / f".tmp.{final.name}.{os.getpid()}.{next(_tmp_counter)}"
    linked = False
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            _step("opened", final)
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            _step("written", final)
            os.fsync(fd)
            _step("synced", final)
        finally:
            os.close(fd)
        _step("closed", final)
        try:
            os.link(tmp, final)
        except FileExistsError as exc:
            raise PublishConflict(
                expected(f"publish target {final.name}", "a name not yet taken", "an existing file")
            ) from exc
        linked = True
        _step("linked", final)
        os.unlink(tmp)
        _step("unlinked", final)
        os.chmod(final, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
        _fsync_dir(directory)
        _step("dir-synced", final)
    except BaseException:
        if not linked or tmp.exists():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        raise


# ---------------------------------------------------------------- listing


def _names(directory: Path) -> list[str]:
    try:
        return sorted(os.listdir(directory))
    except FileNotFoundError:
        return []


def list_generations(directory: PathLike) -> list[int]:
    """Generations with a published manifest, ascending (content not checked)."""
    gens = []
    for name in _names(Path(directory)):
        parsed = parse_generation(name)
        if parsed is not None and parsed[0] == "manifest":
            gens.append(parsed[1])
    return sorted(gens)


def latest_complete_generation(directory: PathLike) -> int | None:
    """The newest *published* generation, or None.

    A generation is published exactly when its manifest was linked into place,
    so torn saves (temp files, orphan shards) are invisible here.  The content is
    not checked: :func:`load` refuses a published generation that is corrupt
    rather than falling back (see the module docstring).
    """
    gens = list_generations(directory)
    return gens[-1] if gens else None


def _next_generation(directory: Path) -> int:
    # Above every generation number any file mentions, orphans included, so a
    # torn generation's leftovers never collide with a new one.
    top = 0
    for name in _names(directory):
        parsed = parse_generation(name)
        if parsed is not None:
            top = max(top, parsed[1])
    return top + 1


# ---------------------------------------------------------------- save


def _shard_bytes(kind: str, lane: int | None, cap_id: str, schema: str, data: Any) -> bytes:
    return codec.encode(
        {"kind": kind, "lane": lane, "capture_id": cap_id, "schema_digest": schema, "data": data}
    )


def save(state: Mapping[str, Any], directory: PathLike, *, fingerprint: str | None = None) -> int:
    """Durably save ``state`` as a new generation in ``directory``; return its number.

    ``fingerprint`` (or ``state["fingerprint"]``) names the pipeline the state
    belongs to; both may be given only if equal.  The directory is created if
    needed.  On any failure the new generation is not published and the shards
    this call published are removed (best effort); the error is re-raised.
    """
    # Validate and encode everything that does not depend on the generation first.
    version, c, fp = validate_state(state, fingerprint=fingerprint)
    universal, lanes = split_state(state)
    # Encoding validates leaves (finite floats, known types) before any file exists.
    codec.pack(universal)
    for sl in lanes.values():
        codec.pack(sl)
    schema = schema_digest(version)
    capture = capture_of(state)

    root = Path(directory)
    if not root.exists():
        root.mkdir(parents=True, exist_ok=True)
        _fsync_dir(root.parent if root.parent != root else root)
    generation = _next_generation(root)
    cap_id = capture_id(
        generation=generation, fingerprint=fp, canonical_replicas=c, capture=capture, schema=schema
    )
    files: list[tuple[ShardEntry, bytes]] = []
    ub = _shard_bytes("universal", None, cap_id, schema, universal)
    files.append((ShardEntry(lane=None, digest=sha256_hex(ub), size=len(ub)), ub))
    for lane, sl in lanes.items():
        lb = _shard_bytes("lane", lane, cap_id, schema, sl)
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
    published: list[Path] = []
    manifest_bytes = encode_manifest(manifest)
    manifest_path = root / manifest_file_name(generation)
    try:
        for entry, data in files:
            target = root / entry.file_name(generation)
            publish_bytes(target, data)
            published.append(target)
        publish_bytes(manifest_path, manifest_bytes)
    except BaseException:
        # If our manifest got linked before the failure (e.g. the directory fsync
        # failed), the generation is visible and whole: never touch it.  The
        # caller still gets the error, so it never reports success.
        if _read(manifest_path) != manifest_bytes:
            for p in published:  # unreferenced: no manifest names them
                with contextlib.suppress(OSError):
                    os.unlink(p)
        raise
    return generation


# ---------------------------------------------------------------- load


@dataclass(frozen=True, slots=True)
class LoadedCheckpoint:
    """A fully validated generation: its manifest and the reassembled state."""

    generation: int
    manifest: Manifest
    state: dict[str, Any]


def _read(path: Path) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def read_manifest(directory: PathLike, generation: int) -> Manifest:
    """Read and validate the manifest of ``generation`` (shards not checked)."""
    root = Path(directory)
    data = _read(root / manifest_file_name(generation))
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


def _read_shard(root: Path, m: Manifest, entry: ShardEntry) -> Any:
    name = entry.file_name(m.generation)
    data = _read(root / name)
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
            expected(f"schema of shard {name}", m.schema_digest, obj["schema_digest"]), reason="schema-mismatch"
        )
    if obj["capture_id"] != m.capture_id:
        raise CheckpointRefused(
            expected(f"capture of shard {name} (a shard of another capture)", m.capture_id, obj["capture_id"]),
            reason="capture-mismatch",
        )
    if not isinstance(obj["data"], dict):
        raise CheckpointCorrupt(
            expected(f"data of shard {name}", "a map", type(obj["data"]).__name__), reason="shard-malformed"
        )
    return obj["data"]


def _assemble(root: Path, m: Manifest) -> dict[str, Any]:
    universal = _read_shard(root, m, m.universal)
    lanes = {e.lane: _read_shard(root, m, e) for e in m.lanes}
    state = join_state(universal, lanes)  # type: ignore[arg-type]
    # Cross-check the assembled state against what the manifest says it captured.
    try:
        version, c, fp = validate_state(state)
    except StateFormatError as exc:
        raise CheckpointCorrupt(f"generation {m.generation}: {exc}", reason="state-malformed") from exc
    # The fingerprint may have come from the save() keyword, so the state need not carry it.
    facts = (version, c, m.fingerprint if fp is None else fp, capture_of(state))
    want = (m.engine_version, m.canonical_replicas, m.fingerprint, m.capture)
    if facts != want:
        raise CheckpointRefused(
            expected(f"assembled state of generation {m.generation}", f"the manifest's capture {want}", facts),
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
) -> LoadedCheckpoint:
    """Validate a whole generation (newest published if None) and return it."""
    if type(min_generation) is not int or min_generation < 0:
        raise ConfigError(expected("min_generation", "an int >= 0", min_generation))
    root = Path(directory)
    if generation is None:
        gen = latest_complete_generation(root)
        if gen is None:
            raise CheckpointNotFound(
                expected(f"checkpoint directory {root}", "at least one published generation", "none"),
            )
    else:
        if type(generation) is not int or generation < 1:
            raise ConfigError(expected("generation", "an int >= 1 or None", generation))
        gen = generation
    m = read_manifest(root, gen)
    _check_manifest(
        m,
        expected_fingerprint=expected_fingerprint,
        expected_canonical_replicas=expected_canonical_replicas,
        min_generation=min_generation,
    )
    return LoadedCheckpoint(generation=gen, manifest=m, state=_assemble(root, m))


def load(
    directory: PathLike,
    generation: int | None = None,
    *,
    expected_fingerprint: str | None = None,
    expected_canonical_replicas: int | None = None,
    min_generation: int = 0,
) -> dict[str, Any]:
    """The state dict of a validated generation; see :func:`load_checkpoint`."""
    return load_checkpoint(
        directory,
        generation,
        expected_fingerprint=expected_fingerprint,
        expected_canonical_replicas=expected_canonical_replicas,
        min_generation=min_generation,
    ).state


def verify_generation(directory: PathLike, generation: int) -> Manifest:
    """Check every digest and header of one generation; return its manifest or raise."""
    return load_checkpoint(directory, generation).manifest


def iter_verify(directory: PathLike) -> Iterator[tuple[int, Manifest | Exception]]:
    """(generation, manifest or the error that refused it) for every published generation."""
    for gen in list_generations(directory):
        try:
            yield gen, verify_generation(directory, gen)
        except (CheckpointCorrupt, CheckpointRefused, CheckpointNotFound) as exc:
            yield gen, exc


class CheckpointReader:
    """Loads generations from one directory and refuses to go backwards.

    It remembers the highest generation it restored; a later request for an
    older one is a *reset cursor* and raises :class:`CheckpointRefused`.  The
    same generation may be loaded again.  It is the single owner of that floor.
    """

    __slots__ = ("_directory", "_fingerprint", "_replicas", "_floor", "highest_restored")

    def __init__(
        self,
        directory: PathLike,
        *,
        expected_fingerprint: str | None = None,
        expected_canonical_replicas: int | None = None,
        min_generation: int = 0,
    ) -> None:
        if type(min_generation) is not int or min_generation < 0:
            raise ConfigError(expected("min_generation", "an int >= 0", min_generation))
        self._directory = Path(directory)
        self._fingerprint = expected_fingerprint
        self._replicas = expected_canonical_replicas
        self._floor = min_generation
        self.highest_restored: int | None = None

    def load(self, generation: int | None = None) -> dict[str, Any]:
        floor = max(self._floor, self.highest_restored or 0)
        loaded = load_checkpoint(
            self._directory,
            generation,
            expected_fingerprint=self._fingerprint,
            expected_canonical_replicas=self._replicas,
            min_generation=floor,
        )
        # Mutate last: only a fully validated load moves the floor.
        self.highest_restored = loaded.generation
        return loaded.state
