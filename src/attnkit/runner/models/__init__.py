"""The model families the runner runs, one module each, and the decoder they share (base.py).

A family module names its ``MODEL_TYPES``, its attention ``KIND`` (mha / mla), config
``DEFAULTS``, ``recipe(reader, model_type, hidden=)`` (its own Architecture fields, read from
config.json) and ``block(model, weights, spec)`` (one decoder layer, from blocks.py).
families.py is the table of them; config.py reads what every family shares; weights.py reads
checkpoints.
"""
