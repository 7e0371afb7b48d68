"""The minimal engine: real model architectures on attnkit attention and the paged KV cache.

- ``engine/``: the ``Sequence`` record (sequence.py), ``Engine``
  (engine.py: prefill / decode / mixed steps; build.py loads and plans), the ``Scheduler``
  (continuous batching, chunked prefill, preemption), the decode graph runner (graphs.py:
  CUDA graphs per batch-size bucket), the one generation loop (generation.py) and ``LLM``
  (llm.py), the generation API; tensor-parallel ranks (launch.py, ranks.py, worker.py).
- ``layers/``: linear, norms, rotary, MLP and experts, MHA and MLA attention, the
  per-step object every layer reads (context.py), and tensor-parallel slices and
  collectives (parallel.py).
- ``models/``: one module per family (llama, gemma2, gpt_oss, deepseek) and the decoder
  they share (base.py); config.py reads config.json, weights.py the checkpoint.
See docs/runner.md. Importing this package imports nothing heavy; each name is loaded (with
torch) on first use.
"""

__all__ = ["Engine", "LLM", "SamplingParams", "Scheduler"]
_HOMES = {"Engine": "engine.engine", "LLM": "engine.llm", "SamplingParams": "engine.sampling",
          "Scheduler": "engine.scheduler"}


def __getattr__(name: str):
    if name in _HOMES:
        import importlib

        from attnkit.hardware import require_package

        require_package("torch", f"attnkit.runner.{name}")   # AK212 with the install line, not ModuleNotFoundError
        return getattr(importlib.import_module(f"attnkit.runner.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'attnkit.runner' has no attribute {name!r}")
