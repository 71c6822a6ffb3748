"""A training framework's data loader over zephon: config -> pipeline -> training tensors.

This is the shape of the zephon loaders real training frameworks ship, small enough to read in one
sitting.  The same code runs on zephon 0.2.0 and on zephon_ref: the backend is a parameter
(``backend="zephon"`` or ``"zephon_ref"``), else the ``ZEPHON_BACKEND`` environment variable, else
``"zephon"``.  Nothing below knows which one it runs on.

The pipeline, from a :class:`LoaderConfig`:

1. data: JSONL directories, one ``zephon.io.Dataset.from_path(name=, path=, fmt="jsonl")`` each,
   mixed by weight in a ``StaticMixtureWorkSource`` (the mixture, chunk size and seed are data
   settings: changing one is a new run);
2. ``tokenize`` with the tokenizer the config names (``tokenizer``: ``"words:<vocab>"``, the
   deterministic word tokenizer below, or ``"hf:<local directory>"``, a Hugging Face tokenizer
   loaded from disk, nothing downloaded);
3. ``shuffle`` (a buffer per lane, seeded);
4. packing into rows of ``seq_len`` tokens (``packing``: ``"sequences"`` is ``pack_sequences`` plus
   a ``map_transform`` that lays each pack out flat with positions and a loss mask, ``"flat"`` is
   ``pack_flat``, which does that in one operator; both give the same fields);
5. ``batch(micro_batch_size)``; each micro-batch becomes tensors with
   ``SampleBatch.to_training(**config.to_training)``.

Topology (:class:`Topology`): ``world_size`` ranks, of which each group of ``tp_size`` consecutive
ranks shares its data (a tensor-parallel group); ``dp_degree = world_size // tp_size`` groups read
``canonical_replicas`` lanes between them, so one optimizer step is ``canonical_replicas``
micro-batches globally and ``canonical_replicas // dp_degree`` (gradient-accumulation steps) per
rank.  That keeps the global batch of every step the same set whatever the number of ranks, which
is what makes an elastic resume (2 ranks -> checkpoint -> 1 rank) exact.

Checkpoints (:meth:`FrameworkLoader.state_dict` / :meth:`save`): every rank calls ``state_dict()`` at
the same step, between steps; with several ranks the ranks run zephon's aggregation round through
``aggregate_dir`` (a directory every rank can reach) and each gets the same merged state, covering
every lane.  Rank 0 writes it; every rank of a resumed run (any rank count) loads it.
"""

from __future__ import annotations

import importlib
import os
import pickle
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any
from zlib import crc32

__all__ = [
    "BACKENDS",
    "DataSpec",
    "FrameworkLoader",
    "LoaderConfig",
    "Topology",
    "WordTokenizer",
    "build_pipeline",
    "import_backend",
    "load_tokenizer",
]

#: The libraries this loader runs on; the one used is the ``backend`` parameter, else ``$ZEPHON_BACKEND``.
BACKENDS = ("zephon", "zephon_ref")
BACKEND_ENV = "ZEPHON_BACKEND"
PACKINGS = ("sequences", "flat")
STATE_FILE = "data_state.pkl"
TOPOLOGY_OPTIONS = (
    "world_size",
    "global_rank",
    "dp_degree",
    "dp_group_id",
    "canonical_replicas",
    "mapping_strategy",
    "aggregate_dir",
    "aggregate_store",
)


def import_backend(backend: str | None = None) -> ModuleType:
    """The zephon module to build with: ``backend``, else ``$ZEPHON_BACKEND``, else ``"zephon"``."""
    name = backend if backend is not None else os.environ.get(BACKEND_ENV, "zephon")
    if name not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, received {name!r}")
    importlib.import_module(f"{name}.io")  # zephon.io: Dataset.from_path
    return importlib.import_module(name)


# -- configuration ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DataSpec:
    """One dataset: a directory of JSONL files, its mixture weight and the field holding the text."""

    name: str
    path: str
    weight: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"DataSpec.name: expected a non-empty str, received {self.name!r}")
        if not isinstance(self.path, str) or not self.path:
            raise TypeError(f"DataSpec.path: expected a non-empty str, received {self.path!r}")
        if isinstance(self.weight, bool) or not isinstance(self.weight, (int, float)) or not self.weight > 0:
            raise ValueError(f"DataSpec.weight: expected a number > 0, received {self.weight!r}")


@dataclass(frozen=True)
class LoaderConfig:
    """What a framework's YAML ``data:`` section holds.  Every field is a data setting (it decides
    which tokens reach which step) except ``backend``, which picks the library."""

    datasets: tuple[DataSpec, ...]
    seq_len: int = 64
    micro_batch_size: int = 2
    canonical_replicas: int = 2
    seed: int = 0
    chunk_size: int = 16
    text_field: str = "text"
    tokenizer: str = "words:1000"
    packing: str = "sequences"
    num_bins: int = 4
    shuffle_buffer: int = 16
    pad_token_id: int = 0
    to_training: Mapping[str, Any] = field(
        default_factory=lambda: {
            "return_labels": True,
            "return_loss_mask": True,
            "return_num_valid_tokens": True,
        }
    )
    #: execution settings for ``Pipeline.options`` (runner, prefetch_batches, max_workers, ...): they
    #: change how fast the data come, never which data (so a resume may change them)
    execution: Mapping[str, Any] = field(default_factory=dict)
    backend: str | None = None

    def __post_init__(self) -> None:
        if not self.datasets or not all(isinstance(d, DataSpec) for d in self.datasets):
            raise TypeError(
                f"LoaderConfig.datasets: expected a non-empty tuple of DataSpec, received {self.datasets!r}"
            )
        names = [d.name for d in self.datasets]
        if len(set(names)) != len(names):
            raise ValueError(f"LoaderConfig.datasets: expected distinct names, received {names}")
        for key in (
            "seq_len",
            "micro_batch_size",
            "canonical_replicas",
            "chunk_size",
            "num_bins",
            "shuffle_buffer",
        ):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"LoaderConfig.{key}: expected an int >= 1, received {v!r}")
        if self.packing not in PACKINGS:
            raise ValueError(f"LoaderConfig.packing: expected one of {PACKINGS}, received {self.packing!r}")
        if not isinstance(self.tokenizer, str) or self.tokenizer.partition(":")[0] not in ("words", "hf"):
            raise ValueError(
                "LoaderConfig.tokenizer: expected 'words:<vocab size>' or 'hf:<directory>', "
                f"received {self.tokenizer!r}"
            )
        if not isinstance(self.execution, Mapping) or set(self.execution) & set(TOPOLOGY_OPTIONS):
            raise ValueError(
                "LoaderConfig.execution: expected a mapping of execution settings (the topology "
                f"comes from Topology), received {self.execution!r}"
            )
        if self.backend is not None and self.backend not in BACKENDS:
            raise ValueError(
                f"LoaderConfig.backend: expected None or one of {BACKENDS}, received {self.backend!r}"
            )

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> LoaderConfig:
        """The config as a framework reads it from YAML or JSON (``datasets`` a list of dicts)."""
        if not isinstance(raw, Mapping):
            raise TypeError(f"LoaderConfig: expected a mapping, received {type(raw).__name__}")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"LoaderConfig: expected keys among {sorted(known)}, received unknown {unknown}")
        data = raw.get("datasets")
        if not isinstance(data, Sequence) or isinstance(data, str):
            raise TypeError(f"LoaderConfig.datasets: expected a list of mappings, received {data!r}")
        specs = tuple(DataSpec(**d) for d in data)
        return cls(**{**raw, "datasets": specs})


@dataclass(frozen=True)
class Topology:
    """This process's place in the job: ``rank`` of ``world_size``; ``tp_size`` consecutive ranks form
    one data-parallel replica (they read the same data)."""

    rank: int = 0
    world_size: int = 1
    tp_size: int = 1

    def __post_init__(self) -> None:
        for key in ("world_size", "tp_size"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"Topology.{key}: expected an int >= 1, received {v!r}")
        if (
            isinstance(self.rank, bool)
            or not isinstance(self.rank, int)
            or not 0 <= self.rank < self.world_size
        ):
            raise ValueError(
                f"Topology.rank: expected an int in [0, {self.world_size}), received {self.rank!r}"
            )
        if self.world_size % self.tp_size:
            raise ValueError(
                f"Topology.tp_size: expected a divisor of world_size={self.world_size}, "
                f"received {self.tp_size}"
            )

    @property
    def dp_degree(self) -> int:
        return self.world_size // self.tp_size

    @property
    def dp_rank(self) -> int:
        return self.rank // self.tp_size

    @classmethod
    def from_env(cls, *, tp_size: int = 1) -> Topology:
        """The topology torchrun (``torch.distributed.run``) describes in RANK / WORLD_SIZE."""
        return cls(
            rank=int(os.environ.get("RANK", "0")),
            world_size=int(os.environ.get("WORLD_SIZE", "1")),
            tp_size=tp_size,
        )


# -- tokenizers -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WordTokenizer:
    """A tiny offline tokenizer with the Hugging Face call convention: whitespace words, each id
    ``crc32(word) % vocab_size + 3`` (0 pad, 1 bos, 2 eos).  crc32 is not salted, so every process
    of every rank gives the same ids (Python's ``hash()`` of a string differs per process)."""

    vocab_size: int = 1000
    pad_token_id: int = 0
    bos_token_id: int = 1
    eos_token_id: int = 2

    def __call__(
        self,
        texts: str | Sequence[str],
        *,
        add_special_tokens: bool = True,
        padding: bool | str = False,
        truncation: bool = False,
        max_length: int | None = None,
        **_: Any,
    ) -> dict[str, list[list[int]]]:
        # the operator adds bos/eos itself (tokenize(special_tokens="bos_eos")): none here
        batch = [texts] if isinstance(texts, str) else list(texts)
        ids = [[crc32(w.encode("utf-8")) % self.vocab_size + 3 for w in t.split()] for t in batch]
        if truncation and max_length is not None:
            ids = [row[:max_length] for row in ids]
        masks = [[1] * len(row) for row in ids]
        if padding == "max_length" and max_length is not None:
            for row, mask in zip(ids, masks, strict=True):
                pad = max(0, max_length - len(row))
                row.extend([self.pad_token_id] * pad)
                mask.extend([0] * pad)
        return {"input_ids": ids, "attention_mask": masks}


def load_tokenizer(spec: str) -> Any:
    """``"words:<vocab size>"`` -> :class:`WordTokenizer`; ``"hf:<directory>"`` -> the Hugging Face
    tokenizer saved in that local directory (``transformers.AutoTokenizer``, offline)."""
    kind, _, arg = spec.partition(":")
    if kind == "words":
        if not arg.isdigit() or int(arg) < 1:
            raise ValueError(f"tokenizer 'words:<vocab size>': expected a size >= 1, received {arg!r}")
        return WordTokenizer(vocab_size=int(arg))
    if kind == "hf":
        if not arg or not Path(arg).is_dir():
            raise ValueError(f"tokenizer 'hf:<directory>': expected a local directory, received {arg!r}")
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(arg, local_files_only=True)
    raise ValueError(f"tokenizer: expected 'words:<vocab size>' or 'hf:<directory>', received {spec!r}")


# -- the pipeline ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FlattenPack:
    """``pack_sequences``' envelope ``{"packed_samples": [...]}`` laid out as one row of ``seq_len``
    tokens: ``input_ids`` padded with ``pad_token_id``, ``attention_mask`` and ``loss_mask`` 1 on real
    tokens, ``positions`` restarting at 0 for every packed sequence and for the padding (the layout
    ``pack_flat(emit_positions=True)`` gives)."""

    seq_len: int
    pad_token_id: int

    def __call__(self, payload: dict[str, Any]) -> dict[str, Any]:
        ids: list[int] = []
        positions: list[int] = []
        for seg in payload["packed_samples"]:
            seg_ids = [int(t) for t in seg["input_ids"]]
            ids.extend(seg_ids)
            positions.extend(range(len(seg_ids)))
        n, pad = len(ids), self.seq_len - len(ids)
        if pad < 0:
            raise RuntimeError(f"pack: expected at most {self.seq_len} tokens per pack, received {n}")
        return {
            "input_ids": ids + [self.pad_token_id] * pad,
            "attention_mask": [1] * n + [0] * pad,
            "loss_mask": [1] * n + [0] * pad,
            "positions": positions + list(range(pad)),
        }


def build_pipeline(
    z: ModuleType, cfg: LoaderConfig, topo: Topology, *, aggregate_dir: str | os.PathLike[str] | None = None
) -> Any:
    """The zephon pipeline of ``cfg`` for this rank, built with module ``z`` (zephon or zephon_ref)."""
    datasets = [z.io.Dataset.from_path(name=d.name, path=d.path, fmt="jsonl") for d in cfg.datasets]
    source = z.StaticMixtureWorkSource(
        datasets, {d.name: float(d.weight) for d in cfg.datasets}, chunk_size=cfg.chunk_size, seed=cfg.seed
    )
    p = z.Pipeline(source).tokenize(
        load_tokenizer(cfg.tokenizer), field=cfg.text_field, max_length=cfg.seq_len, truncation=True
    )
    p = p.shuffle(cfg.shuffle_buffer, seed=cfg.seed)
    if cfg.packing == "flat":
        p = p.pack_flat(
            cfg.seq_len, num_bins=cfg.num_bins, pad_token_id=cfg.pad_token_id, emit_positions=True
        )
    else:
        p = p.pack_sequences(cfg.seq_len, num_bins=cfg.num_bins).map_transform(
            FlattenPack(cfg.seq_len, cfg.pad_token_id)
        )
    p = p.batch(cfg.micro_batch_size)
    if topo.dp_degree > cfg.canonical_replicas or cfg.canonical_replicas % topo.dp_degree:
        raise ValueError(
            f"topology: expected dp_degree dividing canonical_replicas={cfg.canonical_replicas}, "
            f"received dp_degree={topo.dp_degree}"
        )
    opts: dict[str, Any] = {
        **cfg.execution,
        "world_size": topo.world_size,
        "global_rank": topo.rank,
        "dp_degree": topo.dp_degree,
        "dp_group_id": topo.dp_rank,
        "canonical_replicas": cfg.canonical_replicas,
    }
    if aggregate_dir is None and topo.world_size > 1:
        raise ValueError(
            f"aggregate_dir: expected a directory every rank can reach (world_size="
            f"{topo.world_size} checkpoints in an aggregation round), received None"
        )
    if aggregate_dir is not None:
        opts["aggregate_dir"] = os.fspath(aggregate_dir)
    return p.options(**opts)


class FrameworkLoader:
    """What the trainer holds: steps of training tensors, and the data state to checkpoint."""

    def __init__(
        self,
        cfg: LoaderConfig,
        topo: Topology | None = None,
        *,
        backend: str | None = None,
        aggregate_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.config = cfg
        self.topology = topo if topo is not None else Topology()
        self.zephon = import_backend(backend if backend is not None else cfg.backend)
        self.pipeline = build_pipeline(self.zephon, cfg, self.topology, aggregate_dir=aggregate_dir)
        #: micro-batches this rank trains per optimizer step (gradient accumulation)
        self.micro_batches_per_step = cfg.canonical_replicas // self.topology.dp_degree
        self.steps_done = 0
        self._it: Iterator[Any] | None = None

    def next_micro_batch(self) -> dict[str, Any]:
        """This rank's next micro-batch as training tensors; StopIteration at end of data."""
        if self._it is None:
            self._it = iter(self.pipeline)
        return dict(next(self._it).to_training(**self.config.to_training))

    def next_step(self) -> list[dict[str, Any]]:
        """The micro-batches of this rank's next optimizer step; StopIteration at end of data."""
        step = [self.next_micro_batch() for _ in range(self.micro_batches_per_step)]
        self.steps_done += 1
        return step

    # -- checkpoints --------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The data state after the last step (every rank calls it at the same step: with several
        ranks this is zephon's aggregation round, and each rank gets the same merged state)."""
        return {"zephon": self.pipeline.checkpoint(), "steps_done": self.steps_done}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from :meth:`state_dict`'s value (saved on any rank count); before the first step."""
        if self._it is not None:
            raise RuntimeError(
                "load_state_dict: expected a loader that has not started, received one "
                f"{self.steps_done} steps in"
            )
        if not isinstance(state, Mapping) or set(state) != {"zephon", "steps_done"}:
            raise ValueError(
                "load_state_dict: expected {'zephon': ..., 'steps_done': ...}, received "
                f"{sorted(state) if isinstance(state, Mapping) else type(state).__name__}"
            )
        self.pipeline.restore(state["zephon"])
        self.steps_done = int(state["steps_done"])

    def save(self, directory: str | os.PathLike[str]) -> dict[str, Any]:
        """Every rank calls this at the same step; rank 0 writes the merged state to ``directory``."""
        state = self.state_dict()
        if self.topology.rank == 0:
            path = Path(directory)
            path.mkdir(parents=True, exist_ok=True)
            tmp = path / (STATE_FILE + ".tmp")
            tmp.write_bytes(pickle.dumps(state))
            tmp.replace(path / STATE_FILE)
        return state

    def load(self, directory: str | os.PathLike[str]) -> None:
        """Resume from the state :meth:`save` wrote in ``directory`` (written by a trusted run)."""
        self.load_state_dict(pickle.loads((Path(directory) / STATE_FILE).read_bytes()))
