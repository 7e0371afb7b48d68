"""The engine tiers (.ci/run): tests that need vLLM or SGLang, each run in its own venv.

Without the engine installed these files are not collected (the main suite's venv has
neither); with ATTNKIT_ENGINE_TIER naming the engine they are always collected, so a tier
whose install failed fails instead of skipping.
"""
import importlib.util
import os

TIER = os.environ.get("ATTNKIT_ENGINE_TIER", "")
collect_ignore_glob = [f"test_{engine}_*.py" for engine in ("vllm", "sglang")
                       if importlib.util.find_spec(engine) is None and TIER != engine]
