"""AK482: the runner's tensor-parallel ranks (attnkit.runner.engine.ranks)."""
from attnkit.errors.catalog import entry

ENTRIES = [
    entry(
        "AK482", "Tensor-parallel rank failed",
        meaning="With tp_size N > 1 the runner runs N processes (ranks) on torch.distributed "
                "(NCCL on GPUs, gloo on CPU): rank 0 schedules and samples, every rank runs "
                "its shard of each step, and the step's collectives need all of them. A rank "
                "that did not start, failed to load its shard, raised in a step, exited or was "
                "killed, or did not finish a collective within tp_timeout seconds ends the run "
                "with this error on rank 0 instead of a hang. The message names the rank, its "
                "exit code and the error it reported. After it the group cannot run any more "
                "steps: its other ranks are stopped, and a new LLM (or Engine) starts new ones.",
        trigger="LLM(..., tp_size=N) / Engine.from_pretrained(..., tp_size=N) / attnkit "
                "generate --tp-size N when a rank fails to start or load; any later step or "
                "generate call when a rank dies, raises, or stalls past tp_timeout; any call on "
                "an engine whose group already failed or was replaced by a group of another "
                "size.",
        situations=["A rank ran out of GPU memory loading its shard or in a step.",
                    "A rank was killed (OOM killer, a scheduler, kill -9).",
                    "A GPU hung, so a collective never completed.",
                    "Two LLMs of different tp_size in one process: building the second stopped "
                    "the first one's ranks."],
        solutions=["Read the rank's own error in the message (and its stderr), fix that, and "
                   "build a new LLM.",
                   "Give a slow first step (kernel compilation) more time: tp_timeout=600.",
                   "Keep one tp_size per process, or rebuild the LLM you use."],
        before="LLM('./llama-70b', tp_size=8)          # rank 5 killed by the OOM killer",
        after="LLM('./llama-70b', tp_size=8, max_tokens=65536)   # a smaller KV cache per rank",
        related=("AK305", "AK483", "AK489"),
    ),
]
