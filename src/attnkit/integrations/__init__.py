"""attnkit inside other libraries.

``attnkit.integrations.transformers``: ``attn_implementation="attnkit"`` for transformers
models (docs/integrations.md). Importing this package imports nothing heavy.
"""
