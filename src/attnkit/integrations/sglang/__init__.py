"""attnkit inside SGLang: ``--attention-backend attnkit``.

    from attnkit.integrations.sglang import register; register()   # before SGLang parses its args
    python -m sglang.launch_server --model-path MODEL --attention-backend attnkit

``register()`` adds "attnkit" to SGLang's attention registry (``register_attention_backend``)
and to the choices of its ``--attention-backend`` options. SGLang then calls ``create_backend``
with its model runner when it builds the attention backends: it plans the model SGLang loaded
(its hf config, dtype, KV-cache dtype, page size, tensor-parallel size, device), logs one line
with the plan, and returns an ``AttnkitSglangBackend`` (integrations/sglang/backend.py) that runs
attnkit's planned backend on SGLang's own KV pool. What SGLang would check for its own backends
(MLA against MHA, the page size, dual chunk attention) are attnkit's coded reasons here
(AK496, or the planner's own code).
"""
from __future__ import annotations

NAME = "attnkit"
TESTED_VERSIONS = {"sglang": "0.5.23"}      # the version the CI tier runs (docs/integrations.md)


def register() -> str:
    """Make ``--attention-backend attnkit`` parse and build attnkit's backend. Idempotent."""
    from sglang.srt.arg_groups.choices import ATTENTION_BACKEND_CHOICES, add_attention_backend_choices
    from sglang.srt.layers.attention.attention_registry import register_attention_backend

    if NAME not in ATTENTION_BACKEND_CHOICES:
        add_attention_backend_choices([NAME])
    register_attention_backend(NAME)(create_backend)
    return NAME


def create_backend(runner):
    """SGLang's factory call: ``runner`` is its ModelRunner. Raises attnkit's error (AK496, or
    the planner's code with every reason) for what attnkit cannot serve, at start-up."""
    from attnkit.integrations.sglang.backend import AttnkitSglangBackend, plan_runner

    return AttnkitSglangBackend(runner, plan_runner(runner))
