"""Dual chunk attention (the dual_chunk backend) next to plain attention of the same length.

    python benchmarks/bench_dual_chunk.py [--context 131072] [--new 2048] [--reps 10] [--out FILE]

One run on one CUDA GPU. A Qwen2.5-7B-Instruct-1M-like layer (28 q heads, 4 KV heads, head
dim 128, bf16, page 64) with its chunk settings scaled down (chunk_size 32768, local_size
4096: chunk length 28672, original_max_position_embeddings 32768) so a 128k context crosses
five chunks and the length scale is above 1:
  decode   one new token after ``context`` cached tokens;
  prefill  the last ``new`` tokens of a ``context``-token prompt over the cached rest (the
           last piece of a chunked prefill).
The dual_chunk backend runs twice: its Triton path (the parts on attnkit's Triton kernels)
and its torch path. Peers, plain causal attention over the same number of keys (no DCA), in
the same run: attnkit's triton, sdpa and torch_native backends on the same paged cache, and
torch SDPA on contiguous K/V. Each row is timed eagerly and as a CUDA-graph replay (host launch overhead
out; "n/a" where the call cannot be captured); "graph vs SDPA graph" is the contiguous SDPA
graph time over the row's graph time. The dual_chunk
rows also give the max |error| of a few output rows against the float64 dense DCA
reference. A peer that fails prints "n/a (reason)" and the run goes on.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from common import failure_reason  # noqa: E402

CONTIGUOUS = "torch sdpa (contiguous)"
PAGED_PEERS = ("sdpa", "torch_native")
CUDA_PEERS = ("triton",)
DCA_IMPLS = ("triton", "torch")           # dual_chunk's two implementations (CUDA runs both)


@dataclass(frozen=True)
class Setup:
    context: int = 131072
    new: int = 2048
    num_heads: int = 28
    num_kv_heads: int = 4
    head_dim: int = 128
    chunk_size: int = 32768
    local_size: int = 4096
    original_max: int = 32768
    page_size: int = 64
    rope_base: float = 1e6
    dtype: torch.dtype = torch.bfloat16


@dataclass
class Case:
    """One request's whole sequence (context + 1 tokens: the decode token last), raw and
    rotated, with the first ``context`` keys already in a paged cache."""
    setup: Setup
    layer: object
    plain_layer: object
    cache: object
    row: list[int]
    q: torch.Tensor          # [C + 1, H_q, D] raw
    k: torch.Tensor          # [C + 1, H_kv, D] raw
    v: torch.Tensor          # [C + 1, H_kv, D]
    rotary: object


def make_case(setup: Setup, *, device: str) -> Case:
    from attnkit.backends.base import RuntimeLayer
    from attnkit.backends.batch import slots_of
    from attnkit.kvcache.paged import PagedKVCache
    from attnkit.model.spec import DualChunkConfig, LayerAttention
    from attnkit.runner.layers.rotary import DualChunkRotary, dca_length_scale

    cfg = DualChunkConfig(setup.chunk_size, setup.local_size, setup.original_max)
    spec = LayerAttention(layer_id=0, num_heads=setup.num_heads, num_kv_heads=setup.num_kv_heads,
                          head_dim=setup.head_dim, dual_chunk=cfg)
    plain = LayerAttention(layer_id=0, num_heads=setup.num_heads, num_kv_heads=setup.num_kv_heads,
                           head_dim=setup.head_dim)
    total, ps = setup.context + 1, setup.page_size
    gen = torch.Generator().manual_seed(0)
    row = torch.randperm(-(-total // ps), generator=gen).tolist()        # non-contiguous pages
    cache = PagedKVCache([spec], num_pages=len(row), page_size=ps, dtype=setup.dtype, device=device)

    def rand(*shape):
        return torch.randn(*shape, generator=gen).to(device=device, dtype=setup.dtype)

    q = rand(total, setup.num_heads, setup.head_dim)
    k, v = rand(total, setup.num_kv_heads, setup.head_dim), rand(total, setup.num_kv_heads, setup.head_dim)
    rotary = DualChunkRotary(cfg, base=setup.rope_base)
    c = setup.context                     # the prompt, prefilled with L = c
    cache.write(0, torch.tensor(slots_of(row, range(c), ps), device=device),
                rotary.keys(k[:c], torch.arange(c, device=device),
                            length_scale=dca_length_scale(c, setup.original_max)), v[:c])
    return Case(setup, RuntimeLayer(spec), RuntimeLayer(plain), cache, row, q, k, v, rotary)


def step_inputs(case: Case, phase: str):
    """(meta, q3, k_rot, v, lengths L) for the decode token or the last prompt piece."""
    from attnkit.backends.batch import Request, build_batch
    from attnkit.runner.layers.rotary import step_length_scales

    s = case.setup
    start, n, L = (s.context, 1, s.context + 1) if phase == "decode" else (s.context - s.new, s.new, s.context)
    meta = build_batch([Request(start, n, case.row)], page_size=s.page_size, device=case.q.device)
    scale = step_length_scales(meta, case.layer.spec.dual_chunk, lengths=[L])
    q3, k_rot = case.rotary(case.q[start:start + n], case.k[start:start + n], meta.positions,
                            length_scale=scale)
    return meta, q3, k_rot, case.v[start:start + n], L


def max_error(case: Case, out: torch.Tensor, phase: str, rows: int = 4) -> float:
    """Max |out - ref| over ``rows`` output rows (first, last, spread between)."""
    from attnkit.reference_dca import dual_chunk_reference

    s = case.setup
    meta, *_, L = step_inputs(case, phase)
    start, n = meta.prefix_lens_cpu[0], meta.query_lens_cpu[0]
    picks = sorted({round(i * (n - 1) / max(1, rows - 1)) for i in range(rows)})
    end = start + n
    got = out.view(n, s.num_heads, s.head_dim)[picks].double()
    ref = dual_chunk_reference(
        case.q[[start + j for j in picks]], case.k[:end], case.v[:end],
        config=case.layer.spec.dual_chunk, q_positions=[start + j for j in picks],
        rope_base=s.rope_base, q_lengths=L, k_lengths=[s.context] * min(end, s.context) + [L] * (end - s.context))
    return (got - ref).abs().max().item()


def run_phase(case: Case, phase: str, *, timer) -> dict[str, tuple | str]:
    """name -> (ms, CUDA-graph ms or None, max error or None), or why it did not run.
    timer(fn) -> (eager ms, graph ms or None)."""
    import torch.nn.functional as F
    from torch.nn.attention.bias import causal_lower_right

    from attnkit.registry import load_backend

    out: dict[str, tuple | str] = {}
    meta, q3, k_rot, v, _ = step_inputs(case, phase)
    on_cuda = q3.device.type == "cuda"
    for impl in DCA_IMPLS if on_cuda else ("torch",):
        name = f"dual_chunk ({impl})"
        try:
            dca = load_backend("dual_chunk", impl=impl)
            step = dca.prepare(meta, case.cache)
            result = dca.forward(q3, k_rot, v, case.layer, case.cache, step)
            err = max_error(case, result, phase)
            out[name] = (*timer(lambda: dca.forward(q3, k_rot, v, case.layer, case.cache, step)), err)
        except Exception as exc:                  # noqa: BLE001 -- report, keep the run going
            out[name] = failure_reason(exc)
        _free()
    q_plain = q3[:, 0].contiguous()               # plain peers: one query per token
    for name in PAGED_PEERS + (CUDA_PEERS if on_cuda else ()):
        try:
            backend = load_backend(name)
            step = backend.prepare(meta, case.cache)
            out[name] = (*timer(lambda: backend.forward(q_plain, k_rot, v, case.plain_layer, case.cache, step)), None)
        except Exception as exc:                  # noqa: BLE001
            out[name] = failure_reason(exc)
        _free()
    try:
        n, total = q3.shape[0], meta.seq_lens_cpu[0]
        cq = q_plain.transpose(0, 1)[None]                                   # [1, H_q, n, D]
        ck = case.k[:total].transpose(0, 1)[None].contiguous()               # [1, H_kv, S, D]
        cv = case.v[:total].transpose(0, 1)[None].contiguous()
        mask = causal_lower_right(n, total) if n > 1 else None
        fn = lambda: F.scaled_dot_product_attention(cq, ck, cv, attn_mask=mask, enable_gqa=True)  # noqa: E731
        try:
            fn()
        except RuntimeError:                      # no GQA for this mask/kernel: repeat heads (untimed)
            group = case.setup.num_heads // case.setup.num_kv_heads
            rk, rv = ck.repeat_interleave(group, 1), cv.repeat_interleave(group, 1)
            fn = lambda: F.scaled_dot_product_attention(cq, rk, rv, attn_mask=mask)  # noqa: E731
        out[CONTIGUOUS] = (*timer(fn), None)
    except Exception as exc:                      # noqa: BLE001
        out[CONTIGUOUS] = failure_reason(exc)
    _free()
    return out


def rate(setup: Setup, phase: str, ms: float) -> str:
    """decode: GB/s of K/V read (bytes of every cached key and value); prefill: TFLOP/s of
    the causally visible QK^T and PV work. DCA and plain attention do the same work."""
    s = setup
    if phase == "decode":
        nbytes = (s.context + 1) * s.num_kv_heads * 2 * s.head_dim * s.dtype.itemsize
        return f"{nbytes / ms / 1e6:.0f} GB/s"
    pairs = s.new * (s.context - s.new) + s.new * (s.new + 1) // 2
    return f"{2 * 2 * s.num_heads * s.head_dim * pairs / ms / 1e9:.1f} TFLOP/s"


def format_table(results: dict[str, dict], setup: Setup) -> str:
    """Markdown, one line per (phase, peer); a str result is why that peer did not run."""
    lines = ["| case | peer | ms | ms (CUDA graph) | rate (graph) | graph vs SDPA graph "
             "| max abs err vs f64 DCA |", "|---|---|---:|---:|---:|---:|---:|"]
    for phase, peers in results.items():
        case = f"{phase}: {_label(setup, phase)}"
        base = peers.get(CONTIGUOUS)
        base_ms = (base[1] or base[0]) if isinstance(base, tuple) else None
        for name, res in peers.items():
            if isinstance(res, str):
                lines.append(f"| {case} | {name} | n/a ({res}) | | | | |")
                continue
            ms, graph, err = res
            best = graph or ms
            vs = f"{base_ms / best:.2f}" if base_ms else "n/a"
            lines.append(f"| {case} | {name} | {ms:.3f} | {'n/a' if graph is None else f'{graph:.3f}'} "
                         f"| {rate(setup, phase, best)} | {vs} | {'' if err is None else f'{err:.2e}'} |")
    return "\n".join(lines)


def cpu_time_ms(fn, *, reps: int = 3) -> tuple[float, None]:
    """(median wall-clock ms, None): the timer for CPU smoke runs (GPU runs use common)."""
    from common import wall_ms

    return wall_ms(fn, reps=reps), None


def _free() -> None:
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run(setup: Setup, *, device: str, timer) -> dict[str, dict]:
    case = make_case(setup, device=device)
    return {phase: run_phase(case, phase, timer=timer) for phase in ("decode", "prefill")}


def _label(s: Setup, phase: str) -> str:
    k = lambda n: f"{n // 1024}k" if n % 1024 == 0 else str(n)  # noqa: E731
    chunks = math.ceil(s.context / (s.chunk_size - s.local_size))
    if phase == "decode":
        return f"1 token after {k(s.context)} cached, {chunks} chunks"
    return f"last {k(s.new)} of a {k(s.context)} prompt"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", type=int, default=Setup.context)
    parser.add_argument("--new", type=int, default=Setup.new, help="prefill piece length")
    parser.add_argument("--reps", type=int, default=10, help="timed repetitions (median)")
    parser.add_argument("--out", help="also write the markdown (with environment) here")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_dual_chunk needs a CUDA GPU", file=sys.stderr)
        return 2
    from common import emit, environment, graphed, time_ms

    setup = Setup(context=args.context, new=args.new)
    def timer(fn):
        run_graph, note = graphed(fn)
        graph = None if note else time_ms(run_graph, warmup=2, reps=args.reps)
        return time_ms(fn, warmup=2, reps=args.reps), graph

    results = run(setup, device="cuda", timer=timer)
    text = "\n".join([
        f"## bench_dual_chunk ({environment()})", "",
        f"Command: `python benchmarks/bench_dual_chunk.py --context {args.context} --new {args.new} "
        f"--reps {args.reps}`",
        f"Layer: {setup.num_heads} q heads, {setup.num_kv_heads} KV heads, head dim {setup.head_dim}, "
        f"bf16, page {setup.page_size}; DCA chunk_size {setup.chunk_size}, local_size "
        f"{setup.local_size}, original_max {setup.original_max}.", "",
        format_table(results, setup), ""])
    emit(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
