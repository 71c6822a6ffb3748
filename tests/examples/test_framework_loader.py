"""examples/framework_loader: one loader module, run on zephon 0.2.0 and on zephon_ref.

* The same config gives the same training tensors on both (``to_training``'s tensors compared: values,
  dtypes and shapes), per rank of a 2-rank topology too, whatever the execution settings.
* A resume is exact: 2 ranks -> checkpoint -> 1 rank -> checkpoint -> 2, each rank a process under torchrun
  (``python -m torch.distributed.run``, gloo on CPU, a localhost rendezvous on a free port), give the
  global batches of the uninterrupted run, step for step, on both libraries.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip(
    "torch", reason="the example converts batches to torch tensors (zephon_ref[torch])"
)

from examples.framework_loader.loader import (  # noqa: E402
    DataSpec,
    FlattenPack,
    FrameworkLoader,
    LoaderConfig,
    Topology,
    import_backend,
    load_tokenizer,
)
from properties.sources import zephon_available  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "examples" / "framework_loader" / "train.py"

needs_zephon = [
    pytest.mark.conformance,
    pytest.mark.skipif(
        not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])"
    ),
]
BACKENDS = [pytest.param("zephon", marks=needs_zephon), "zephon_ref"]


def write_corpus(root: Path) -> dict[str, Any]:
    """Two JSONL datasets (web in two shard files, code in one) of short documents of 2..12 words."""
    for name, files, docs in (("web", 2, 48), ("code", 1, 40)):
        (root / name).mkdir(parents=True)
        for f in range(files):
            with open(root / name / f"part-{f:05d}.jsonl", "w") as out:
                for i in range(docs):
                    words = " ".join(f"{name}{f}.{i}.{j}" for j in range(2 + (i * 7 + f) % 11))
                    out.write(json.dumps({"text": words, "id": f"{name}-{f}-{i}"}) + "\n")
    return {
        "datasets": [
            {"name": "web", "path": str(root / "web"), "weight": 2.0},
            {"name": "code", "path": str(root / "code"), "weight": 1.0},
        ],
        "seq_len": 24,
        "micro_batch_size": 2,
        "canonical_replicas": 2,
        "seed": 7,
        "chunk_size": 12,
        "num_bins": 3,
        "shuffle_buffer": 8,
    }


@pytest.fixture(scope="module")
def raw_config(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return write_corpus(tmp_path_factory.mktemp("corpus"))


def tensors(micro_batch: dict[str, Any]) -> dict[str, tuple[str, list[Any]]]:
    """The tensors of one ``to_training`` result: name -> (dtype, values as nested lists)."""
    out = {
        k: (str(v.dtype), v.tolist()) for k, v in sorted(micro_batch.items()) if isinstance(v, torch.Tensor)
    }
    assert {"input_ids", "labels", "loss_mask", "positions"} <= set(out), sorted(micro_batch)
    return out


def run_steps(
    raw: dict[str, Any],
    backend: str,
    steps: int,
    topo: Topology | None = None,
    aggregate_dir: Path | None = None,
) -> list[list[Any]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = FrameworkLoader(
            LoaderConfig.from_dict(raw), topo, backend=backend, aggregate_dir=aggregate_dir
        )
        return [[tensors(mb) for mb in loader.next_step()] for _ in range(steps)]


def global_step(micro_batches: list[dict[str, Any]]) -> list[str]:
    """A global batch as a set: every micro-batch of the step, whichever rank trained it."""
    return sorted(json.dumps(mb, sort_keys=True) for mb in micro_batches)


# -- the same batches on both libraries ----------------------------------------------------------------
@pytest.mark.conformance
@pytest.mark.skipif(not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])")
@pytest.mark.parametrize(
    "execution",
    [{}, {"runner": "inline"}, {"runner": "threads", "prefetch_batches": 2}],
    ids=["default", "inline", "threads"],
)
def test_zephon_and_zephon_ref_give_the_same_training_tensors(
    raw_config: dict[str, Any], execution: dict[str, Any]
) -> None:
    raw = {**raw_config, "execution": execution}
    want = run_steps(raw, "zephon", 6)
    got = run_steps(raw, "zephon_ref", 6)
    assert len(want) == 6 and all(len(step) == 2 for step in want)
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        assert g == w, f"step {i}"
    # not a vacuous comparison: real documents of several lengths, packed with padding and boundaries
    flat = [t for step in want for mb in step for row in mb["positions"][1] for t in row]
    assert flat.count(0) > 12 and max(flat) >= 8
    # and the bookkeeping beside the tensors: each row's primary sample (dataset, shard, index)
    assert primary_ids(raw, "zephon_ref", 6) == primary_ids(raw, "zephon", 6)


def primary_ids(raw: dict[str, Any], backend: str, steps: int) -> list[list[tuple[int, ...]]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = FrameworkLoader(LoaderConfig.from_dict(raw), backend=backend)
        mbs = [mb for _ in range(steps) for mb in loader.next_step()]
    return [[tuple(int(x) for x in sid) for sid in mb["ids"]] for mb in mbs]


@pytest.mark.conformance
@pytest.mark.skipif(not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])")
@pytest.mark.parametrize("rank", [0, 1])
def test_each_rank_of_two_reads_the_same_tensors_on_both(
    raw_config: dict[str, Any], rank: int, tmp_path: Path
) -> None:
    topo = Topology(rank=rank, world_size=2)
    want = run_steps(raw_config, "zephon", 4, topo, tmp_path / "z")
    assert all(len(step) == 1 for step in want), "2 lanes on 2 ranks: one micro-batch per rank and step"
    assert run_steps(raw_config, "zephon_ref", 4, topo, tmp_path / "r") == want


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_ranks_of_a_tensor_parallel_group_read_the_same_data(
    raw_config: dict[str, Any], backend: str, tmp_path: Path
) -> None:
    """4 ranks, tp_size=2: ranks 0 and 1 are data-parallel rank 0, ranks 2 and 3 rank 1; each pair
    reads what rank 0 and rank 1 of a 2-rank job read."""
    for dp_rank in (0, 1):
        want = run_steps(raw_config, backend, 3, Topology(rank=dp_rank, world_size=2), tmp_path / "a")
        for rank in (2 * dp_rank, 2 * dp_rank + 1):
            topo = Topology(rank=rank, world_size=4, tp_size=2)
            assert (topo.dp_degree, topo.dp_rank) == (2, dp_rank)
            assert run_steps(raw_config, backend, 3, topo, tmp_path / "b") == want
    assert run_steps(raw_config, backend, 3, Topology(rank=0, world_size=2), tmp_path / "a") != run_steps(
        raw_config, backend, 3, Topology(rank=1, world_size=2), tmp_path / "a"
    )


@pytest.mark.conformance
@pytest.mark.skipif(not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])")
def test_the_flatten_after_pack_sequences_lays_packs_out_as_pack_flat_does(
    raw_config: dict[str, Any],
) -> None:
    """packing="flat" (zephon's pack_flat) and "sequences" (pack_sequences + FlattenPack) give the same
    tensors on zephon 0.2.0, so switching the config from one to the other changes no batch."""
    assert run_steps({**raw_config, "packing": "flat"}, "zephon", 4) == run_steps(raw_config, "zephon", 4)


def test_pack_flat_on_zephon_ref_matches_the_flattened_packs(raw_config: dict[str, Any]) -> None:
    assert run_steps({**raw_config, "packing": "flat"}, "zephon_ref", 4) == run_steps(
        raw_config, "zephon_ref", 4
    )


def save_word_level_tokenizer(directory: Path) -> None:
    """A Hugging Face tokenizer built offline (word level, the corpus's vocabulary), saved like a
    downloaded one: ``AutoTokenizer.from_pretrained(directory)`` loads it."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    words = ["<pad>", "<s>", "</s>", "<unk>", "web0", "web1", "code0", ".", *map(str, range(48))]
    model = tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>")
    tok = tokenizers.Tokenizer(model)
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()  # "web0.3.1" -> web0 . 3 . 1
    transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    ).save_pretrained(directory)


@pytest.mark.conformance
@pytest.mark.skipif(not zephon_available(), reason="zephon 0.2.0 not installed (pip install .[conformance])")
def test_a_hugging_face_tokenizer_from_a_local_directory_gives_the_same_tensors_on_both(
    raw_config: dict[str, Any], tmp_path: Path
) -> None:
    """tokenizer="hf:<dir>" is the one-line switch from the word tokenizer to a framework's own."""
    save_word_level_tokenizer(tmp_path / "tok")
    raw = {**raw_config, "tokenizer": f"hf:{tmp_path / 'tok'}"}
    want = run_steps(raw, "zephon", 4)
    assert run_steps(raw, "zephon_ref", 4) == want
    ids = [t for step in want for mb in step for row in mb["input_ids"][1] for t in row]
    assert 3 not in ids, "every word of the corpus is in the vocabulary (no <unk>)"
    assert want != run_steps(raw_config, "zephon", 4), "another tokenizer, other tensors"


# -- resume ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_resume_in_one_process_continues_the_stream(
    raw_config: dict[str, Any], backend: str, tmp_path: Path
) -> None:
    want = run_steps(raw_config, backend, 5)
    cfg = LoaderConfig.from_dict(raw_config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = FrameworkLoader(cfg, backend=backend)
        got = [[tensors(mb) for mb in first.next_step()] for _ in range(2)]
        first.save(tmp_path)
        second = FrameworkLoader(cfg, backend=backend)
        second.load(tmp_path)
        assert second.steps_done == 2
        got += [[tensors(mb) for mb in second.next_step()] for _ in range(3)]
    assert got == want


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def torchrun(tmp: Path, tag: str, nproc: int, backend: str, steps: int, *extra: str) -> list[dict[str, Any]]:
    """One job of ``nproc`` ranks under torchrun; the global steps rank 0 wrote."""
    config, out = tmp / "config.json", tmp / f"{tag}.jsonl"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=1",
        f"--nproc_per_node={nproc}",
        "--master-addr=127.0.0.1",
        f"--master-port={free_port()}",
        str(TRAIN),
        "--config",
        str(config),
        "--backend",
        backend,
        "--steps",
        str(steps),
        "--aggregate-dir",
        str(tmp / f"{tag}-agg"),
        "--out",
        str(out),
        *extra,
    ]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "OMP_NUM_THREADS": "1",
        "PYTHONWARNINGS": "ignore",
    }
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == steps
    assert all(len(line["ranks"]) == nproc for line in lines)
    return lines


@pytest.mark.parametrize("backend", BACKENDS)
def test_elastic_resumes_under_torchrun_give_the_uninterrupted_global_batches(
    raw_config: dict[str, Any], backend: str, tmp_path: Path
) -> None:
    """2 ranks -> checkpoint -> 1 rank -> checkpoint -> 2 ranks (both changes, three jobs, and the
    second checkpoint is taken by a resumed run), two steps each, against one uninterrupted run."""
    (tmp_path / "config.json").write_text(json.dumps(raw_config))
    jobs = [
        torchrun(tmp_path, "a", 2, backend, 2, "--save", str(tmp_path / "ckpt-a")),
        torchrun(
            tmp_path,
            "b",
            1,
            backend,
            2,
            "--resume",
            str(tmp_path / "ckpt-a"),
            "--save",
            str(tmp_path / "ckpt-b"),
        ),
        torchrun(tmp_path, "c", 2, backend, 2, "--resume", str(tmp_path / "ckpt-b")),
    ]
    lines = [line for job in jobs for line in job]
    assert [line["step"] for line in lines] == [1, 2, 3, 4, 5, 6]
    observed = [global_step([mb for rank in line["ranks"] for mb in rank]) for line in lines]
    want = [global_step(step) for step in run_steps(raw_config, backend, 6)]
    assert all(len(step) == 2 for step in want)
    for i, (w, o) in enumerate(zip(want, observed, strict=True)):
        assert o == w, f"global step {i + 1} (job {'abc'[i // 2]})"


# -- the config refuses bad input -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("change", "error", "needle"),
    [
        ({"seq_len": 0}, ValueError, "seq_len"),
        ({"packing": "bins"}, ValueError, "packing"),
        ({"tokenizer": "bpe"}, ValueError, "tokenizer"),
        ({"backend": "zephyr"}, ValueError, "backend"),
        ({"execution": {"world_size": 2}}, ValueError, "execution"),
        ({"datasets": "web"}, TypeError, "datasets"),
        ({"datasets": [{"name": "a", "path": "x", "weight": 0}]}, ValueError, "weight"),
        ({"shards": 3}, ValueError, "unknown ['shards']"),
    ],
)
def test_bad_config_is_refused_with_a_typed_error(
    raw_config: dict[str, Any], change: dict[str, Any], error: type[Exception], needle: str
) -> None:
    with pytest.raises(error, match="expected") as info:
        LoaderConfig.from_dict({**raw_config, **change})
    assert needle in str(info.value)


def test_bad_topology_and_tokenizer_are_refused(raw_config: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="rank: expected an int in"):
        Topology(rank=2, world_size=2)
    with pytest.raises(ValueError, match="tp_size: expected a divisor"):
        Topology(world_size=3, tp_size=2)
    with pytest.raises(ValueError, match="dp_degree dividing canonical_replicas=2"):
        FrameworkLoader(
            LoaderConfig.from_dict(raw_config),
            Topology(rank=0, world_size=3),
            backend="zephon_ref",
            aggregate_dir="agg",
        )
    with pytest.raises(ValueError, match="aggregate_dir: expected a directory"):
        FrameworkLoader(
            LoaderConfig.from_dict(raw_config), Topology(rank=0, world_size=2), backend="zephon_ref"
        )
    with pytest.raises(ValueError, match="a local directory"):
        load_tokenizer("hf:/nonexistent/tokenizer")
    with pytest.raises(RuntimeError, match="at most 4 tokens"):
        FlattenPack(4, 0)({"packed_samples": [{"input_ids": [1, 2, 3, 4, 5]}]})


def test_the_backend_comes_from_the_parameter_then_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZEPHON_BACKEND", "zephon_ref")
    assert import_backend().__name__ == "zephon_ref"
    monkeypatch.setenv("ZEPHON_BACKEND", "nope")
    with pytest.raises(ValueError, match="backend: expected one of"):
        import_backend()
    assert import_backend("zephon_ref").__name__ == "zephon_ref"


def test_the_loader_refuses_a_restore_once_started(raw_config: dict[str, Any]) -> None:
    loader = FrameworkLoader(LoaderConfig.from_dict(raw_config), backend="zephon_ref")
    state = loader.state_dict()
    loader.next_step()
    with pytest.raises(RuntimeError, match="has not started"):
        loader.load_state_dict(state)
    with pytest.raises(ValueError, match="expected"):
        FrameworkLoader(LoaderConfig.from_dict(raw_config), backend="zephon_ref").load_state_dict({"x": 1})
    assert DataSpec("a", "p").weight == 1.0
