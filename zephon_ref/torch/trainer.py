"""The reference trainer: a tiny deterministic model trained from a Pipeline, checkpointed durably.

Theory of operation
-------------------
:class:`ReferenceTrainer` exists so the tests and the demo can check the user's
resume-equivalence rule end to end: *five uninterrupted updates end in exactly
the state reached by three updates, a checkpoint, and two more updates in fresh
processes* (seed 001).  It is deliberately small:

* the model is an embedding plus a linear head over ``vocab_size`` token
  buckets (token id ``mod vocab_size``), initialised from a private
  ``torch.Generator`` seeded with ``config.seed`` (never the global RNG);
* the optimizer is AdamW (it has per-parameter state, so a resume that forgot
  it would show);
* ``torch.use_deterministic_algorithms(True)`` is on while it trains, and the
  loss is a next-token cross entropy over :func:`collate_for_training`'s shifted
  labels (it never predicts across a packed-document boundary);
* data comes through a plain torch DataLoader over
  :func:`~zephon_ref.torch.stateful.to_stateful_dataset`, with any
  ``num_workers``; one update consumes one pipeline batch.

**A checkpoint is the pipeline state and the trainer state, published in that
order.**  :meth:`ReferenceTrainer.save` writes the consumed pipeline state as a
generation of the durable store (``<dir>/pipeline``, :mod:`zephon_ref.checkpoint`),
then publishes ``<dir>/trainer-g<gen>.<sha256>.pt`` (model, optimizer, update
count, the DataLoader role pointer, the pipeline generation it belongs to) with
the store's durable write.  The trainer file is the commit point: a generation
without one (a crash between the two writes) is never resumed from.
:meth:`ReferenceTrainer.load` takes the newest trainer file, checks its digest,
loads exactly the pipeline generation it names (every shard validated, the
fingerprint checked) and only then touches the model, optimizer or dataset, so
a refused load changes nothing.

What may not live here: pipeline logic, collation rules (:mod:`.collate`), the
store's file format (:mod:`zephon_ref.checkpoint`).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zephon_ref.checkpoint import store as ckpt_store
from zephon_ref.errors import ConfigError, ContractError, expected
from zephon_ref.storage.errors import CheckpointCorrupt, CheckpointNotFound
from zephon_ref.torch.collate import IGNORE_INDEX, collate_for_training
from zephon_ref.torch.device import require_torch
from zephon_ref.torch.stateful import STATE_FORMAT, to_stateful_dataset

if TYPE_CHECKING:
    from zephon_ref.pipeline import Pipeline

__all__ = ["TrainerConfig", "ReferenceTrainer", "TrainingCollate", "main"]

_TRAINER_FILE = re.compile(r"^trainer-g(\d{8})\.([0-9a-f]{64})\.pt$")


@dataclass(frozen=True, slots=True)
class TrainerConfig:
    """The trainer's data-independent settings (all part of what a resume must match)."""

    seed: int = 0
    vocab_size: int = 1024
    dim: int = 16
    lr: float = 1e-2
    num_workers: int = 0

    def __post_init__(self) -> None:
        for name, lo in (("seed", 0), ("vocab_size", 2), ("dim", 1), ("num_workers", 0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ConfigError(expected(f"TrainerConfig.{name}", f"an int >= {lo}", v))
        if isinstance(self.lr, bool) or not isinstance(self.lr, float) or not self.lr > 0:
            raise ConfigError(expected("TrainerConfig.lr", "a float > 0", self.lr))


@dataclass(frozen=True, slots=True)
class TrainingCollate:
    """The worker-side collate: :func:`collate_for_training` on the CPU (picklable)."""

    def __call__(self, item: Any) -> dict[str, Any]:
        return collate_for_training(item, device="cpu")


def _build_model(config: TrainerConfig) -> Any:
    torch = require_torch()
    gen = torch.Generator().manual_seed(config.seed)
    model = torch.nn.Sequential(torch.nn.Embedding(config.vocab_size, config.dim),
                                torch.nn.Linear(config.dim, config.vocab_size))
    with torch.no_grad():
        for p in model.parameters():  # fixed init: a private generator, in parameter order
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.05)
    return model


class ReferenceTrainer:
    """Train a tiny model on a pipeline's batches; save and resume model, optimizer and pipeline together."""

    def __init__(self, pipeline: Pipeline, *, config: TrainerConfig | None = None) -> None:
        torch = require_torch()
        self.config = config if config is not None else TrainerConfig()
        if not isinstance(self.config, TrainerConfig):
            raise ConfigError(expected("config", "a TrainerConfig", type(self.config).__name__))
        self.pipeline = pipeline
        self.dataset = to_stateful_dataset(pipeline, collate=TrainingCollate())
        self.model = _build_model(self.config)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=self.config.lr)
        self.updates = 0
        self.losses: list[float] = []
        self._batches: Iterator[Any] | None = None

    # -- training -----------------------------------------------------------------------------
    def _next_batch(self) -> dict[str, Any]:
        torch = require_torch()
        if self._batches is None:
            loader = torch.utils.data.DataLoader(self.dataset, batch_size=None,
                                                 num_workers=self.config.num_workers)
            self._batches = self.dataset.track(loader)
        try:
            batch: dict[str, Any] = next(self._batches)
            return batch
        except StopIteration:
            raise ContractError(expected("a pipeline batch for the next update", "one more batch",
                                         f"the end of the stream after {self.updates} updates")) from None

    def step(self, batch: dict[str, Any]) -> float:
        """One AdamW update on one collated batch; returns the loss."""
        return self.update([batch])

    def update(self, batches: Sequence[dict[str, Any]]) -> float:
        """One AdamW update on several collated batches (a global step), summed in the order given.

        The loss is the sum of every target token's cross entropy divided by the
        number of target tokens, accumulated batch by batch in ``batches`` order,
        so equal batch lists give bit-equal updates on any topology.
        """
        torch = require_torch()
        v = self.config.vocab_size
        total = torch.zeros((), dtype=torch.float32)
        count = 0
        for batch in batches:
            ids = batch["input_ids"].remainder(v)
            labels = batch["labels"]
            labels = torch.where(labels == IGNORE_INDEX, labels, labels.remainder(v))
            logits = self.model(ids)
            total = total + torch.nn.functional.cross_entropy(logits.reshape(-1, v), labels.reshape(-1),
                                                              ignore_index=IGNORE_INDEX, reduction="sum")
            count += int((labels != IGNORE_INDEX).sum())
        loss = total / max(count, 1)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.updates += 1
        value = float(loss.detach())
        self.losses.append(value)
        return value

    def train(self, updates: int) -> list[float]:
        """``updates`` updates, one pipeline batch each; returns their losses."""
        if isinstance(updates, bool) or not isinstance(updates, int) or updates < 0:
            raise ConfigError(expected("updates", "an int >= 0", updates))
        torch = require_torch()
        was = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(True)
        try:
            return [self.step(self._next_batch()) for _ in range(updates)]
        finally:
            torch.use_deterministic_algorithms(was)

    def close(self) -> None:
        """Stop the DataLoader's workers (the consumed state stays readable)."""
        self._batches = None

    # -- checkpoint ---------------------------------------------------------------------------
    def save(self, directory: str | Path) -> int:
        """Publish the pipeline state, then the trainer state (the commit point); return the generation."""
        state = self.dataset.state_dict()
        return self.publish(directory, state["engine"],
                            {"num_workers": state["num_workers"], "next_role": state["next_role"]})

    def publish(self, directory: str | Path, engine_state: dict[str, Any], extra: dict[str, Any]) -> int:
        """Publish ``engine_state`` to ``<directory>/pipeline``, then this trainer's file naming it."""
        torch = require_torch()
        root = Path(directory)
        gen = ckpt_store.save(engine_state, root / "pipeline")
        buf = io.BytesIO()
        torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                    "updates": self.updates, "losses": list(self.losses), "pipeline_generation": gen,
                    "config": self._config_key(), **extra}, buf)
        blob = buf.getvalue()
        name = f"trainer-g{gen:08d}.{hashlib.sha256(blob).hexdigest()}.pt"
        ckpt_store.publish_bytes(root / name, blob)
        return gen

    def _config_key(self) -> list[Any]:
        return [self.config.seed, self.config.vocab_size, self.config.dim, self.config.lr]

    def load(self, directory: str | Path) -> int:
        """Resume from the newest committed checkpoint in ``directory``; return its generation.

        Must be called before the first update.  Everything is read and
        validated before the model, optimizer or dataset change.
        """
        saved, engine, gen = self.read(directory)
        state = {"format": STATE_FORMAT, "engine": engine, "num_workers": saved["num_workers"],
                 "next_role": saved["next_role"]}
        self.dataset.load_state_dict(state)  # validates first; the last step that can refuse
        self.adopt(saved)
        return gen

    def read(self, directory: str | Path) -> tuple[dict[str, Any], dict[str, Any], int]:
        """(trainer file content, validated pipeline state, generation) of the newest committed checkpoint.

        Reads and validates only: nothing changes.
        """
        torch = require_torch()
        if self._batches is not None or self.updates:
            raise ContractError(
                expected("load()", "a trainer that has not trained yet", f"{self.updates} updates")
            )
        root = Path(directory)
        found = sorted((m.group(1), m.group(2), p) for p in (root.iterdir() if root.is_dir() else [])
                       if (m := _TRAINER_FILE.match(p.name)))
        if not found:
            raise CheckpointNotFound(
                expected(f"trainer checkpoint in {root}", "a trainer-g*.pt file", "none")
            )
        gen_text, digest, path = found[-1]
        blob = path.read_bytes()
        if hashlib.sha256(blob).hexdigest() != digest:
            raise CheckpointCorrupt(expected(f"{path.name}", "content matching the digest in its name",
                                             "other bytes"), reason="digest-mismatch")
        saved = torch.load(io.BytesIO(blob), weights_only=True)
        if saved["config"] != self._config_key():
            raise CheckpointCorrupt(expected(f"{path.name} trainer config", repr(self._config_key()),
                                             saved["config"]), reason="config-mismatch")
        gen = int(gen_text)
        loaded = ckpt_store.load_checkpoint(
            root / "pipeline", gen, expected_fingerprint=self.pipeline.fingerprint()
        )
        # a dry run of the model and optimizer state before anything is replaced
        probe = _build_model(self.config)
        probe.load_state_dict(saved["model"])
        torch.optim.AdamW(probe.parameters(), lr=self.config.lr).load_state_dict(saved["optimizer"])
        return saved, loaded.state, gen

    def adopt(self, saved: dict[str, Any]) -> None:
        """Take the model, optimizer and counters of a trainer file :meth:`read` validated."""
        torch = require_torch()
        model = _build_model(self.config)
        model.load_state_dict(saved["model"])
        optimizer = torch.optim.AdamW(model.parameters(), lr=self.config.lr)
        optimizer.load_state_dict(saved["optimizer"])
        self.model, self.optimizer = model, optimizer
        self.updates = int(saved["updates"])
        self.losses = [float(x) for x in saved["losses"]]

    def snapshot(self) -> dict[str, Any]:
        """Model and optimizer state, detached copies (for torch.equal comparisons)."""
        torch = require_torch()
        opt = self.optimizer.state_dict()
        return {"model": {k: v.detach().clone() for k, v in self.model.state_dict().items()},
                "optimizer_state": {int(k): {n: (t.clone() if isinstance(t, torch.Tensor) else t)
                                             for n, t in s.items()} for k, s in opt["state"].items()},
                "updates": self.updates, "losses": list(self.losses)}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m zephon_ref.torch.trainer``: train (optionally resuming), save, dump a snapshot."""
    parser = argparse.ArgumentParser(prog="python -m zephon_ref.torch.trainer", description=main.__doc__)
    parser.add_argument("--updates", type=int, required=True, help="updates to run in this process")
    parser.add_argument("--checkpoint-dir", help="resume from here if --resume; save here at the end")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader num_workers")
    parser.add_argument("--seed", type=int, default=0, help="the demo pipeline's and the model's seed")
    parser.add_argument("--snapshot", help="torch.save the final model/optimizer snapshot here")
    args = parser.parse_args(argv)
    torch = require_torch()
    torch.set_num_threads(1)  # the same reduction order in every process
    from zephon_ref.demo import build_demo_pipeline

    trainer = ReferenceTrainer(build_demo_pipeline(seed=args.seed),
                               config=TrainerConfig(seed=args.seed, num_workers=args.workers))
    if args.resume:
        trainer.load(args.checkpoint_dir)
    trainer.train(args.updates)
    if args.checkpoint_dir:
        trainer.save(args.checkpoint_dir)
    trainer.close()
    if args.snapshot:
        torch.save(trainer.snapshot(), args.snapshot)
    print(f"trainer: {trainer.updates} updates, last loss {trainer.losses[-1]:.6f}" if trainer.losses
          else "trainer: 0 updates")
    return 0


if __name__ == "__main__":
    # run the imported module's main, so pickled classes name zephon_ref.torch.trainer, not __main__
    from zephon_ref.torch.trainer import main as _main

    sys.exit(_main())
