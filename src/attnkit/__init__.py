"""attnkit: the attention-backend layer of an LLM inference engine.

``import attnkit`` is torch-free; runtime pieces import torch when used.
"""
from attnkit.errors import AttnkitError

__version__ = "0.1.0"
__all__ = ["AttnkitError", "plan", "__version__"]


def plan(model, platform="auto", request=None, **kwargs):
    """Plan attention backends for ``model`` on ``platform``; see planning/solver.py."""
    from attnkit.planning.solver import plan as _plan

    return _plan(model, platform, request, **kwargs)
