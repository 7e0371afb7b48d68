"""The minimal engine: real model architectures on attnkit attention and the paged KV cache.

``Engine`` (engine.py) loads a local checkpoint, plans its backends through ``attnkit.plan``
and runs prefill / decode / mixed steps; ``Scheduler`` (scheduler.py) batches requests over
it continuously (chunked prefill, preemption), ``sampling`` chooses tokens, and ``LLM``
(llm.py) is the generate-many-prompts API. The model: ``arch`` (block recipe per family),
``model`` (layer loop), ``attention`` (MHA/GQA), ``mla`` (DeepSeek's latent attention),
``mlp`` (dense and experts), ``routing`` (DeepSeek V2/V3 expert routers), ``rope`` +
``rotary`` (RoPE of every type, and the dual-chunk rotation that feeds the ``dual_chunk``
backend). See docs/runner.md.
Importing this package imports nothing heavy; each name is loaded (with torch) on first use.
"""

__all__ = ["Engine", "LLM", "SamplingParams", "Scheduler"]
_HOMES = {"Engine": "engine", "LLM": "llm", "SamplingParams": "sampling", "Scheduler": "scheduler"}


def __getattr__(name: str):
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(f"attnkit.runner.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'attnkit.runner' has no attribute {name!r}")
