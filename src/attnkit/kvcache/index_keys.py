"""How the cache stores a DSA layer's indexer keys (``PagedKVCache.index_k``), torch-free.

index_k: [num_pages, page_size, D_i] beside the layer's latent, same pages, same slots, in the
index dtype: a compute dtype (stored as the key cast to it), or fp8 e4m3 with
index_k_scale: [num_pages, page_size] float32, one scale per token (DeepSeek-V3.2 quantises its
indexer keys in blocks of the head dim, so one block per key):

    scale  = max(amax, INDEX_AMAX_FLOOR) / INDEX_FP8_MAX      amax = max |k| over its D_i values
    stored = fp8_e4m3(clamp(float32(k) / scale, -448, 448))   (round to nearest)
    read   = float32(stored) * scale

The floor keeps an all-zero key's scale finite (it stores zeros). docs/dsa.md states it again.
Which dtypes an index cache may have, and its default: registry/capabilities.py.
"""
INDEX_FP8_MAX = 448.0
INDEX_AMAX_FLOOR = 1e-4
