"""Pipeline.save_checkpoint / load_checkpoint: durable resume across processes, and refusals."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from properties.pipelines import PipelineConfig, build_pipeline, item_view
from zephon_ref.errors import ZephonRefError

CFG = PipelineConfig(
    [
        ("pack_sequences", {"max_length": 160, "num_bins": 3}),
        ("shuffle", {"buffer_size": 4, "seed": 2}),
        ("batch", {"microbatch_size": 2}),
    ],
    layout={"web": (14, 9), "code": (8,), "books": (5,)},
    source_kwargs={"chunk_size": 6, "seed": 3},
    options={"runner": "inline", "canonical_replicas": 3, "flush_every_k_chunks": 2},
)
ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import json, sys
sys.path.insert(0, {root!r})
from properties.pipelines import PipelineConfig, build_pipeline, item_view
fields = json.loads(sys.argv[3])
fields["layout"] = {{k: tuple(v) for k, v in fields["layout"].items()}}
p = build_pipeline("zephon_ref", PipelineConfig(**fields))
gen = p.load_checkpoint(sys.argv[1])
it = iter(p)
out = [item_view(next(it)) for _ in range(int(sys.argv[2]))]
print(json.dumps({{"generation": gen, "items": out}}))
"""


def _jsonish(items):
    return json.loads(json.dumps(items))


def test_five_steps_equal_three_save_load_in_new_process_two(tmp_path):
    full = [item_view(x) for x in build_pipeline("zephon_ref", CFG)][:5]
    p = build_pipeline("zephon_ref", CFG)
    it = iter(p)
    head = [item_view(next(it)) for _ in range(3)]
    assert p.save_checkpoint(tmp_path) == 1
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cfg_json = json.dumps(dataclasses.asdict(CFG))  # the child rebuilds CFG (tests never import tests)
    res = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT)), str(tmp_path), "2", cfg_json],
                         capture_output=True, text=True, env=env, check=False)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got["generation"] == 1
    assert _jsonish(head) + got["items"] == _jsonish(full)


def test_refused_loads_change_no_file_and_no_state(tmp_path):
    p = build_pipeline("zephon_ref", CFG)
    it = iter(p)
    for _ in range(2):
        next(it)
    p.save_checkpoint(tmp_path)
    next(it)
    p.save_checkpoint(tmp_path)
    other = build_pipeline(
        "zephon_ref",
        PipelineConfig(
            CFG.chain[:1], layout=CFG.layout, source_kwargs=CFG.source_kwargs, options=CFG.options
        ),
    )
    files = {f.name: f.read_bytes() for f in tmp_path.iterdir()}
    with pytest.raises(ZephonRefError, match="fingerprint"):
        other.load_checkpoint(tmp_path)
    q = build_pipeline("zephon_ref", CFG)
    assert q.load_checkpoint(tmp_path) == 2
    before = q.checkpoint()
    with pytest.raises(ZephonRefError, match="reset cursor"):
        q.load_checkpoint(tmp_path, 1)
    shard = next(f for f in sorted(tmp_path.iterdir()) if f.name.startswith("g000000000002.lane"))
    data = bytearray(shard.read_bytes())
    os.chmod(shard, 0o644)
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    files[shard.name] = bytes(data)
    with pytest.raises(ZephonRefError):
        q.load_checkpoint(tmp_path, 2)
    assert q.checkpoint() == before
    assert {f.name: f.read_bytes() for f in tmp_path.iterdir()} == files
