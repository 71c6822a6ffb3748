"""A writer or reader process against the test S3 server (run as a script, never imported by pytest).

usage: _s3_child.py URL count SEED      -- save crash_state(SEED); print the number of HTTP requests it made
       _s3_child.py URL step K SEED     -- save crash_state(SEED), SIGKILL itself right after HTTP request K
       _s3_child.py URL loop N SEED0    -- print "ready", then save crash_state(SEED0 + i) for i < N
       _s3_child.py URL race N SEED0    -- print "ready", wait for "go" on stdin, save N states, print
                                           one JSON line [[generation, seed] or [error, seed], ...]
       _s3_child.py URL resume ITEMS 0  -- build the restore pipeline, load_checkpoint(URL), print the
                                           next ITEMS items' views as one JSON line
The endpoint and credentials come from the AWS environment variables (the
session fixture sets them).  Requests are counted with a botocore event hook
(every HTTP attempt, retries included, the probe included).
"""

from __future__ import annotations

import json
import os
import signal
import sys

from properties.ckpt_campaigns import child_loop, child_race, crash_state
from zephon_ref.checkpoint import s3, store


def resume_pipeline() -> object:
    from properties.pipelines import PipelineConfig, build_pipeline

    cfg = PipelineConfig(chain=[], options={"runner": "inline", "canonical_replicas": 3},
                         source_kwargs={"chunk_size": 8, "seed": 11}, corpus_seed=2)
    return build_pipeline("zephon_ref", cfg)


def main() -> None:
    url, mode, n, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    if mode == "resume":
        from properties.pipelines import item_view

        p = resume_pipeline()
        gen = p.load_checkpoint(url)  # type: ignore[attr-defined]
        it = iter(p)  # type: ignore[call-overload]
        print(json.dumps({"generation": gen, "items": [item_view(next(it)) for _ in range(n)]}, default=repr))
        return
    storage = s3.storage_for(s3.location(url).bucket)
    count = 0

    def sent(**_: object) -> None:
        nonlocal count
        count += 1

    def after(**_: object) -> None:
        if count == n:
            os.kill(os.getpid(), signal.SIGKILL)

    storage.client.meta.events.register("before-send.s3", sent)
    if mode == "count":
        store.save(crash_state(seed), url)
        print(count, flush=True)
    elif mode == "step":
        storage.client.meta.events.register("needs-retry.s3", after)  # once per attempt, after its answer
        store.save(crash_state(seed), url)
        print("completed", flush=True)
    elif mode in ("loop", "race"):
        storage.ensure_conditional_writes()  # the probe's requests before "ready", not in the kill window
        (child_loop if mode == "loop" else child_race)(url, n, seed)

if __name__ == "__main__":
    main()
