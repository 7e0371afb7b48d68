"""attnkit: the attention-backend layer of an LLM inference engine.

``import attnkit`` is torch-free; runtime pieces import torch when used.
"""
from attnkit.errors import AttnkitError

__version__ = "0.1.0"
__all__ = ["AttnkitError", "plan", "__version__"]


def plan(model, platform="auto", request=None, **kwargs):
    """Plan the attention backends that serve ``model`` on ``platform``: a ``Plan``.

        >>> p = attnkit.plan("deepseek-v3", "h100", page_size=64)
        >>> p.ok, p.prefill_backend, p.decode_backend, p.run.page_size
        (True, 'sdpa', 'triton_mla', 64)
        >>> print(p)                  # the text `attnkit plan` prints (p.render(short=True): brief)
        >>> p.to_dict()               # the JSON `attnkit plan --json` prints (docs/plan-json.md)

    ``model``: a preset name (``attnkit models``), a config.json path, a model directory, a
    parsed config dict or a ``ModelAttention``. ``platform``: ``"auto"`` (this machine), a
    device preset (``attnkit devices``: "h100", "cpu", ...) or a ``Platform``.
    ``request`` (a dict) and keyword settings are what ``attnkit plan``'s flags set, each
    optional: ``attention_backend``, ``prefill_attention_backend``,
    ``decode_attention_backend``, ``page_size``, ``kv_cache_dtype``, ``dtype``, ``tp_size``,
    ``speculative_tokens``, ``dual_chunk`` ("auto" / "on" / "off"), ``cuda_graph``, ``deny``.
    Keywords of the planner itself: ``profile`` (a device profile file; False: none),
    ``workload`` ({phase: {batch, new, context}}), ``strict=True`` (raise the plan's error
    instead of returning ``ok=False``), ``label``, ``env``, ``registry``.

    Returns a ``Plan``: chosen backends with why, settings, adjustments (what was filled in and
    by which rule), every rejected candidate's reasons, warnings (``speed_costs``: a setting
    that moves a role to a measurably slower backend), and on failure ``ok=False`` with
    ``error`` (code, message, solutions, example fix; ``attnkit explain CODE``). Input that
    cannot be read (an unknown model, device or setting) raises ``AttnkitError``. Torch-free.
    """
    from attnkit.planning.solver import plan as _plan

    return _plan(model, platform, request, **kwargs)
