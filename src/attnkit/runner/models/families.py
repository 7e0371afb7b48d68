"""The table of model families: ``model_type`` -> the family's module (llama.py, gemma2.py,
gpt_oss.py, deepseek.py). config.py reads a family's fields through it, base.py builds its
blocks through it; the family modules build on blocks.py, below both.
"""
from attnkit.runner.models import deepseek, gemma2, gpt_oss, llama

FAMILIES = {t: m for m in (llama, gemma2, gpt_oss, deepseek) for t in m.MODEL_TYPES}
SUPPORTED = tuple(FAMILIES)
