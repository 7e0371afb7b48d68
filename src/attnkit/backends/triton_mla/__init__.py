"""Triton kernels for multi-head latent attention (DeepSeek-V2/V3, Kimi-K2) over a paged
latent cache: absorbed split-KV decode/verify (decode.py) and MHA-form extend (extend.py)."""
