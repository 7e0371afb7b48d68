import sys, os, torch, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, "benchmarks"); sys.path.insert(0, "src")
from common import time_ms
from attnkit.backends.sdpa import backend as sb
from attnkit.backends.paged_torch import visibility
from attnkit.backends.base import AttentionLayer
from attnkit.model.spec import LayerAttention
layer = AttentionLayer(LayerAttention(layer_id=0, num_heads=32, num_kv_heads=8, head_dim=128))
for label, B, n, S, prefix in [("decode64x4k", 64, 1, 4097, [4096]*64), ("decode16x1k ragged", 16, 1, 1025, [1024]*16), ("extend2k/8k", 1, 2048, 10240, [8192])]:
    q = torch.randn(B, 32, n, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, 8, S, 128, device="cuda", dtype=torch.bfloat16); v = torch.randn_like(k)
    kv = [S] * B
    if "ragged" in label: kv = [S - i for i in range(B)]; prefix=[x-1 for x in kv]
    m = visibility(layer, [n]*B, kv, prefix, device="cuda")
    m = None if m is None else m[:, None]
    ref = None
    for gqa in ("fold", "enable", "repeat"):
        try:
            fn = lambda: sb.sdpa(q, k, v, mask=m, is_causal=False, scale=0.088, gqa=gqa)
            o = fn()
            if ref is None: ref = o
            err = (o.float() - ref.float()).abs().max().item()
            print(label, "mask" if m is not None else "nomask", gqa, f"{time_ms(fn, reps=10):.3f} ms", f"err {err:.3g}", flush=True)
        except Exception as e:
            print(label, gqa, "ERR", str(e)[:100])
