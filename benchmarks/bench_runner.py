"""End-to-end throughput of the runner (``attnkit.runner.LLM``) next to transformers.

    python benchmarks/bench_runner.py [--out FILE] [--reps N] [--backend triton]
    python benchmarks/bench_runner.py --tiny          # CPU smoke test of the same code

A Llama-3-8B-shaped model (32 layers, hidden 4096, 32 q / 8 KV heads, head dim 128, MLP
14336, vocab 128256, plain RoPE) with random bf16 weights is built on the GPU with
transformers (nothing is downloaded); the runner reads the same tensors. Rows:
  prefill  8 prompts x 1024 tokens, generate(max_new_tokens=1): tokens/s, and TFLOP/s of the
           model's matmuls + causal attention against the measured bf16 matmul ceiling;
  decode   B in {1, 64} prompts of 128 tokens, 32 greedy steps: rate = B * 32 / (t(33 new
           tokens) - t(1 new token)), so prefill cancels; GB/s counts the weights (and KV)
           every step must read, against the measured copy ceiling.
Peer in the same run: transformers' own forward (attn_implementation="sdpa", DynamicCache,
greedy loop, same shapes and the same difference formula). The runner's times include its
scheduler, per-step metadata, input checks and sampling; it runs no CUDA graphs, so small
batches are bound by Python launch overhead. "runner stats" is the runner's own RunStats
rate for the last timed call (prefill steps / decode-only steps), a cross-check.
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import ceilings, emit, environment, failure_reason, time_ms, wall_ms  # noqa: E402

import torch  # noqa: E402

LLAMA3_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                 num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                 head_dim=128, max_position_embeddings=8192, rope_theta=500000.0,
                 tie_word_embeddings=False)
TINY = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            max_position_embeddings=512, tie_word_embeddings=False)


@dataclass(frozen=True)
class Sizes:
    prefill_prompts: int
    prefill_len: int
    decode_batches: tuple[int, ...]
    decode_ctx: int
    decode_steps: int


FULL = Sizes(8, 1024, (1, 64), 128, 32)
SMALL = Sizes(2, 32, (1, 4), 16, 4)


def build_model(config_kw: dict, device: str, dtype: torch.dtype):
    """Random-weight LlamaForCausalLM created directly on ``device`` in ``dtype``."""
    import transformers

    config = transformers.LlamaConfig(**config_kw)
    config._attn_implementation = "sdpa"
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            torch.manual_seed(0)
            model = transformers.LlamaForCausalLM(config).eval()
    finally:
        torch.set_default_dtype(before)
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation("sdpa")
    return model


def prompts(n: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (n, length), generator=g).tolist()


def runner_rows(llm, sizes: Sizes, vocab: int, timer, reps: int) -> dict[str, tuple[float, float | None]]:
    """{case: (ms, runner-stats tokens/s)}; decode ms is per step (prefill cancelled)."""
    out = {}
    batch = prompts(sizes.prefill_prompts, sizes.prefill_len, vocab, 1)
    run = lambda ps, n: llm.generate(ps, max_new_tokens=n, ignore_eos=True)
    ms = timer(lambda: run(batch, 1), warmup=1, reps=reps)
    out["prefill"] = (ms, llm.last_stats.prefill_tok_s)
    for b in sizes.decode_batches:
        ps = prompts(b, sizes.decode_ctx, vocab, 2)
        t1 = timer(lambda: run(ps, 1), warmup=1, reps=reps)
        tn = timer(lambda: run(ps, sizes.decode_steps + 1), warmup=1, reps=reps)
        out[f"decode B={b}"] = ((tn - t1) / sizes.decode_steps, llm.last_stats.decode_tok_s)
    return out


def hf_rows(model, sizes: Sizes, vocab: int, timer, reps: int) -> dict[str, float]:
    """Same cases through transformers' forward: {case: ms} (decode: ms per step)."""
    dev = next(model.parameters()).device

    def forward(ids, **kw):
        try:
            return model(ids, logits_to_keep=1, **kw)
        except TypeError:                  # older transformers: no logits_to_keep
            return model(ids, **kw)

    def greedy(ids: torch.Tensor, steps: int) -> None:
        out = forward(ids, use_cache=True)
        tok = out.logits[:, -1].argmax(-1, keepdim=True)
        for _ in range(steps):
            out = forward(tok, past_key_values=out.past_key_values, use_cache=True)
            tok = out.logits[:, -1].argmax(-1, keepdim=True)
        tok.tolist()                       # a host sync, as the runner's sampling does

    out = {}
    with torch.no_grad():
        ids = torch.tensor(prompts(sizes.prefill_prompts, sizes.prefill_len, vocab, 1), device=dev)
        out["prefill"] = timer(lambda: forward(ids, use_cache=False).logits.argmax(-1).tolist(),
                               warmup=1, reps=reps)
        for b in sizes.decode_batches:
            ids = torch.tensor(prompts(b, sizes.decode_ctx, vocab, 2), device=dev)
            t0 = timer(lambda: greedy(ids, 0), warmup=1, reps=reps)
            tn = timer(lambda: greedy(ids, sizes.decode_steps), warmup=1, reps=reps)
            out[f"decode B={b}"] = (tn - t0) / sizes.decode_steps
    return out


def physics(case: str, ms: float, sizes: Sizes, cfg: dict, layer_params: int,
            head_params: int, elem: int) -> tuple[float, str, str]:
    """(value, unit, ceiling key): prefill TFLOP/s of matmuls + causal attention; decode GB/s
    of weights (layers + LM head) and KV read per step."""
    h, d, l = cfg["num_attention_heads"], cfg["head_dim"], cfg["num_hidden_layers"]
    if case == "prefill":
        n, p = sizes.prefill_prompts, sizes.prefill_len
        flops = 2 * layer_params * n * p + 2 * head_params * n + 4 * l * h * d * n * p * (p + 1) // 2
        return flops / ms / 1e9, "TFLOP/s", "matmul_tflops"
    b = int(case.split("=")[1])
    ctx = sizes.decode_ctx + sizes.decode_steps // 2          # mean KV length over the steps
    kv = b * ctx * l * 2 * cfg["num_key_value_heads"] * d * elem
    return ((layer_params + head_params) * elem + kv) / ms / 1e6, "GB/s", "copy_gbs"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="a tiny model (CPU smoke test)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--backend", help="runner attention backend (default: triton on CUDA, "
                                          "torch_native on CPU)")
    parser.add_argument("--reps", type=int, default=3, help="timed repetitions (median)")
    parser.add_argument("--no-peer", action="store_true", help="skip the transformers peer")
    parser.add_argument("--out", help="also write the markdown report here")
    args = parser.parse_args(argv)
    cuda = args.device.startswith("cuda")
    if not args.tiny and not cuda:
        print("bench_runner needs a CUDA GPU for the 8B shape (use --tiny on CPU)", file=sys.stderr)
        return 2
    for category in (UserWarning, FutureWarning):     # planner notes, transformers deprecations
        warnings.filterwarnings("ignore", category=category)
    from attnkit.runner import LLM

    cfg, sizes = (TINY, SMALL) if args.tiny else (LLAMA3_8B, FULL)
    dtype = torch.bfloat16 if cuda else torch.float32
    backend = args.backend or ("triton" if cuda else "torch_native")
    timer = time_ms if cuda else wall_ms
    if not cuda:        # tiny CPU matrices: a thread pool only spins against other processes
        torch.set_num_threads(1)
    ceil = ceilings() if cuda else {}
    model = build_model(cfg, args.device, dtype)
    layer_params = sum(p.numel() for p in model.model.layers.parameters())
    head_params = model.lm_head.weight.numel()
    elem = torch.empty((), dtype=dtype).element_size()
    kv_tokens = max(sizes.prefill_prompts * sizes.prefill_len,
                    max(sizes.decode_batches) * (sizes.decode_ctx + sizes.decode_steps + 1))
    llm = LLM(model, device=args.device, dtype=dtype, max_tokens=kv_tokens,
              attention_backend=backend, max_num_batched_tokens=sizes.prefill_prompts * sizes.prefill_len)
    ours = runner_rows(llm, sizes, cfg["vocab_size"], timer, args.reps)
    try:
        peer = {} if args.no_peer else hf_rows(model, sizes, cfg["vocab_size"], timer, args.reps)
    except Exception as exc:               # noqa: BLE001 -- report, keep the runner's rows
        peer = {case: failure_reason(exc) for case in ours}
    tokens = {"prefill": sizes.prefill_prompts * sizes.prefill_len,
              **{f"decode B={b}": b for b in sizes.decode_batches}}
    lines = ["| case | peer | ms | tokens/s | rate | % of ceiling | runner stats tok/s | vs transformers |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for case, (ms, stat) in ours.items():
        label = (f"prefill {sizes.prefill_prompts}x{sizes.prefill_len}" if case == "prefill"
                 else f"{case} ctx={sizes.decode_ctx} ({sizes.decode_steps} steps; ms per step)")
        rows = [(f"attnkit LLM ({backend})", ms, stat)]
        if case in peer:
            rows.append(("transformers (sdpa)", peer[case], None))
        hf = peer.get(case)
        for name, t, s in rows:
            if not isinstance(t, float):
                lines.append(f"| {label} | {name} | n/a ({t}) | | | | | |")
                continue
            value, unit, key = physics(case, t, sizes, cfg, layer_params, head_params, elem)
            pct = f"{100 * value / ceil[key]:.0f}%" if key in ceil else "n/a"
            vs = f"{hf / t:.2f}" if isinstance(hf, float) else "n/a"
            lines.append(f"| {label} | {name} | {t:.2f} | {tokens[case] / t * 1e3:,.0f} | "
                         f"{value:.3g} {unit} | {pct} | {f'{s:,.0f}' if s else ''} | {vs} |")
    shape = "tiny Llama" if args.tiny else "Llama-3-8B shape"
    given = list(argv if argv is not None else sys.argv[1:])
    shown = [a for i, a in enumerate(given)            # the command, less where it wrote
             if not a.startswith("--out") and not (i and given[i - 1] == "--out")]
    command = " ".join(["python benchmarks/bench_runner.py"] + shown)
    text = "\n".join([
        f"## bench_runner ({environment()})", "",
        f"Command: `{command}`",
        f"Model: {shape} ({cfg['num_hidden_layers']} layers, hidden {cfg['hidden_size']}, "
        f"{cfg['num_attention_heads']}/{cfg['num_key_value_heads']} heads, head dim {cfg['head_dim']}, "
        f"MLP {cfg['intermediate_size']}, vocab {cfg['vocab_size']}; "
        f"{(layer_params + head_params + model.model.embed_tokens.weight.numel()) / 1e9:.2f} B params), "
        f"random {str(dtype).removeprefix('torch.')} weights, {args.device}; runner plan: "
        f"{llm.plan.prefill_backend}/{llm.plan.decode_backend}, page {llm.plan.settings['page_size']}."
        + (f" Ceilings: copy {ceil['copy_gbs']:.0f} GB/s, bf16 matmul {ceil['matmul_tflops']:.0f} TFLOP/s."
           if ceil else ""), "",
        "\n".join(lines),
        "", "vs transformers = transformers' time / the runner's (above 1: the runner is faster).", ""])
    emit(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
