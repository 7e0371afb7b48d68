"""Paged torch backends (torch_native, sdpa) next to torch SDPA on contiguous K/V.

    python benchmarks/bench_runtime.py [--out FILE] [--reps N]

One run on one CUDA GPU: measures the machine's ceilings (copy GB/s, bf16 matmul TFLOP/s),
then times, on a Llama-3-8B-like layer (32 q heads, 8 KV heads, head dim 128, bf16, page 16):
  decode  B in {1, 16, 64} x context in {1k, 4k}: one new token per request; GB/s counts the
          K/V bytes read (B * ctx * H_kv * (D + D_v) * 2);
  extend  2048 new tokens over an 8k cached prefix; TFLOP/s counts causal QK^T and PV work.
Peers in the same run: torch SDPA on contiguous K/V, restricted to each of its flash, cuDNN
and memory-efficient kernels. "vs SDPA" is the best contiguous SDPA time divided by the
row's time (1.0 = as fast, 0.25 = four times slower). The paged backends' times include
what a real step pays (input validation, writing the step's K/V into the cache, the page
gather); the contiguous peers' do not. A peer that fails prints "n/a (reason)" and the run
goes on. Decode rows are timed with a cold L2.
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import ceilings, emit, environment, failure_reason, time_ms  # noqa: E402

import torch  # noqa: E402


@dataclass(frozen=True)
class Shape:
    num_heads: int = 32
    num_kv_heads: int = 8
    head_dim: int = 128
    page_size: int = 16
    dtype: torch.dtype = torch.bfloat16

    @property
    def elem_bytes(self) -> int:
        return torch.empty((), dtype=self.dtype).element_size()


@dataclass(frozen=True)
class Row:
    """decode: ``batch`` requests with ``context`` cached tokens, one new token each.
    extend: one request adding ``new`` tokens to a ``context``-token prefix."""
    kind: str
    batch: int
    context: int
    new: int = 1

    @property
    def label(self) -> str:
        k = lambda n: f"{n // 1024}k" if n % 1024 == 0 else str(n)
        if self.kind == "decode":
            return f"decode B={self.batch} ctx={k(self.context)}"
        return f"extend q={k(self.new)} prefix={k(self.context)}"


ROWS = [Row("decode", b, ctx) for b in (1, 16, 64) for ctx in (1024, 4096)] + [
    Row("extend", 1, 8192, new=2048)]
SDPA_KERNELS = ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION")
CONTIGUOUS = "contiguous sdpa"


def kv_bytes(row: Row, shape: Shape) -> int:
    """Bytes of K and V a decode step must read: every request's whole KV after the step."""
    tokens = row.batch * (row.context + row.new)
    return tokens * shape.num_kv_heads * 2 * shape.head_dim * shape.elem_bytes


def attention_flops(row: Row, shape: Shape) -> int:
    """QK^T plus PV multiply-adds (x2) over the causally visible pairs only: the query at
    position p sees p + 1 keys, positions context .. context + new - 1."""
    pairs = row.new * row.context + row.new * (row.new + 1) // 2
    return 2 * row.batch * shape.num_heads * pairs * 2 * shape.head_dim


def rate(row: Row, shape: Shape, ms: float) -> tuple[float, str]:
    """(value, unit): decode GB/s of K/V read, extend TFLOP/s of attention math."""
    if row.kind == "decode":
        return kv_bytes(row, shape) / ms / 1e6, "GB/s"
    return attention_flops(row, shape) / ms / 1e9, "TFLOP/s"


def format_table(results: dict[Row, dict[str, float | str]], shape: Shape, ceil: dict[str, float]) -> str:
    """Markdown: one line per (row, peer); a str result is the reason a peer did not run."""
    lines = ["| case | peer | ms | rate | % of ceiling | vs SDPA |", "|---|---|---:|---:|---:|---:|"]
    for row, peers in results.items():
        timed = [ms for name, ms in peers.items() if name.startswith(CONTIGUOUS) and isinstance(ms, float)]
        best = min(timed) if timed else None
        ceiling = ceil.get("copy_gbs" if row.kind == "decode" else "matmul_tflops")
        for name, ms in peers.items():
            if not isinstance(ms, float):
                lines.append(f"| {row.label} | {name} | n/a ({ms}) | | | |")
                continue
            value, unit = rate(row, shape, ms)
            pct = f"{100 * value / ceiling:.0f}%" if ceiling else "n/a"
            vs = f"{best / ms:.2f}" if best else "n/a"
            lines.append(f"| {row.label} | {name} | {ms:.3f} | {value:.{0 if unit == 'GB/s' else 1}f} {unit} "
                         f"| {pct} | {vs} |")
    return "\n".join(lines)


def make_case(row: Row, shape: Shape, gen: torch.Generator, *, device: str = "cuda"):
    """Random cache (shuffled pages), metadata, and this step's q/k/v on ``device``."""
    from attnkit.backends.base import RuntimeLayer
    from attnkit.backends.batch import Request, build_batch
    from attnkit.kvcache.paged import PagedKVCache
    from attnkit.model.spec import LayerAttention

    spec = LayerAttention(layer_id=0, num_heads=shape.num_heads, num_kv_heads=shape.num_kv_heads,
                          head_dim=shape.head_dim)
    ps = shape.page_size
    per_req = -(-(row.context + row.new) // ps)
    order = torch.randperm(row.batch * per_req, generator=gen).tolist()
    reqs = [Request(row.context, row.new, order[i * per_req:(i + 1) * per_req]) for i in range(row.batch)]
    cache = PagedKVCache([spec], num_pages=row.batch * per_req, page_size=ps, dtype=shape.dtype, device=device)
    cache.k[0].normal_()
    cache.v[0].normal_()
    meta = build_batch(reqs, page_size=ps, device=device)
    t = meta.num_tokens
    q = torch.randn(t, shape.num_heads, shape.head_dim, device=device, dtype=shape.dtype)
    k = torch.randn(t, shape.num_kv_heads, shape.head_dim, device=device, dtype=shape.dtype)
    v = torch.randn_like(k)
    return RuntimeLayer(spec), cache, meta, q, k, v


def _contiguous(row: Row, shape: Shape):
    """q [B, H_q, new, D], k/v [B, H_kv, ctx + new, D] and the lower-right causal bias."""
    from torch.nn.attention.bias import causal_lower_right

    s = row.context + row.new
    q = torch.randn(row.batch, shape.num_heads, row.new, shape.head_dim, device="cuda", dtype=shape.dtype)
    k = torch.randn(row.batch, shape.num_kv_heads, s, shape.head_dim, device="cuda", dtype=shape.dtype)
    v = torch.randn_like(k)
    mask = causal_lower_right(row.new, s) if row.new > 1 else None
    return q, k, v, mask


def time_row(row: Row, shape: Shape, *, reps: int) -> dict[str, float | str]:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    from attnkit.registry import load_backend

    out: dict[str, float | str] = {}
    cold = row.kind == "decode"
    gen = torch.Generator().manual_seed(0)
    try:
        layer, cache, meta, q, k, v = make_case(row, shape, gen)
    except Exception as exc:            # noqa: BLE001 -- report, keep the run going
        return {"setup": failure_reason(exc)}
    for name in ("torch_native", "sdpa"):
        try:
            backend = load_backend(name)
            step = backend.prepare(meta, cache)
            out[name] = time_ms(lambda: backend.forward(q, k, v, layer, cache, step), reps=reps, cold_l2=cold)
        except Exception as exc:        # noqa: BLE001
            out[name] = failure_reason(exc)
        torch.cuda.empty_cache()
    del cache
    try:
        cq, ck, cv, mask = _contiguous(row, shape)
    except Exception as exc:            # noqa: BLE001
        return out | {CONTIGUOUS: failure_reason(exc)}
    group = shape.num_heads // shape.num_kv_heads
    for kernel in SDPA_KERNELS:
        label = f"{CONTIGUOUS}[{kernel.split('_')[0].lower()}]"
        try:
            with sdpa_kernel(getattr(SDPBackend, kernel)):
                try:
                    fn = lambda: F.scaled_dot_product_attention(cq, ck, cv, attn_mask=mask, enable_gqa=True)
                    fn()
                except Exception:       # noqa: BLE001 -- no GQA here: repeat heads (not timed)
                    rk, rv = ck.repeat_interleave(group, 1), cv.repeat_interleave(group, 1)
                    fn = lambda: F.scaled_dot_product_attention(cq, rk, rv, attn_mask=mask)
                    fn()
                    label += " (kv repeated)"
                out[label] = time_ms(fn, reps=reps, cold_l2=cold)
        except Exception as exc:        # noqa: BLE001
            out[label] = failure_reason(exc)
        torch.cuda.empty_cache()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the markdown table (with environment) here")
    parser.add_argument("--reps", type=int, default=20, help="timed repetitions per peer (median)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_runtime needs a CUDA GPU", file=sys.stderr)
        return 2
    # Restricting SDPA to one kernel makes torch explain every kernel it skipped; the table
    # already says which peers ran.
    warnings.filterwarnings("ignore", message=r".*(not used because|runtime disabled|fused kernels require)")
    shape = Shape()
    ceil = ceilings()
    results = {row: time_row(row, shape, reps=args.reps) for row in ROWS}
    text = "\n".join([
        f"## bench_runtime ({environment()})", "",
        f"Command: `python benchmarks/bench_runtime.py{' --reps ' + str(args.reps) if args.reps != 20 else ''}`",
        f"Shape: {shape.num_heads} q heads, {shape.num_kv_heads} KV heads, head dim {shape.head_dim}, "
        f"bf16, page {shape.page_size}. Ceilings: copy {ceil['copy_gbs']:.0f} GB/s, "
        f"bf16 matmul {ceil['matmul_tflops']:.0f} TFLOP/s.", "",
        format_table(results, shape, ceil), ""])
    emit(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
