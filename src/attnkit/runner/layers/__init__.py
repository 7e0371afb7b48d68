"""The layers of a decoder block, each ``layer(x, ctx)`` over the packed tokens of a step:
linear maps (linear.py), RMSNorm (norm.py), RoPE and the dual-chunk rotation (rope.py,
rotary.py), the gated MLP (mlp.py) and mixtures of experts with their routers (moe.py,
routing.py), MHA/GQA and MLA attention (attention.py, mla.py) over any attnkit backend, and
the per-step object every layer reads (context.py)."""
