"""End-to-end throughput of the runner (``attnkit.runner.LLM``) next to transformers, same run.

    python benchmarks/bench_runner.py [--out FILE.md] [--json FILE.json] [--reps N] [--no-compile]
    python benchmarks/bench_runner.py --tiny          # CPU smoke test of the same code
    python benchmarks/bench_runner.py --tp-size 2     # + the runner over 2 GPUs (tensor parallel)

A Llama-3-8B-shaped model (32 layers, hidden 4096, 32 q / 8 KV heads, head dim 128, MLP
14336, vocab 128256, plain RoPE) with random bf16 weights is built on the GPU with
transformers (nothing is downloaded); the runner reads the same tensors. Rows:
  prefill  8 prompts x 1024 tokens: tokens/s and TFLOP/s of the model's matmuls + causal
           attention against the measured bf16 matmul ceiling;
  decode   B in {1, 64} prompts of 128 tokens, 64 greedy steps: rate = B * 64 /
           (t(65 new tokens) - t(1 new token)), so prefill cancels; "% of limit" is against
           the weight-read limit, B * (measured copy rate) / (weight bytes): every step reads
           every weight once.
Rows per decode case: the runner with CUDA graphs (every bucket captured at start-up: the
capture time and graph memory are reported), the runner eager (--cuda-graph off: the same
static decode steps launched one kernel at a time, uncaptured),
transformers eager (DynamicCache greedy loop), transformers with a static cache and
``torch.compile(mode="reduce-overhead")`` (its documented fast path; compiled once per batch
size, compile time reported, not timed). Greedy tokens of every peer are compared with the
runner's (graphs) token for token. The report is written after every row (a run cut short
keeps what it measured): markdown (--out) and JSON (--json).
Greedy check (last, CUDA): random bf16 weights give near-tied logits (the top two of 128k
differ by ~0.3 on average, bf16 rounding moves them by ~0.01), so tokens of two correct bf16
implementations part within a few dozen tokens. The same shape in float32 (TF32 off: errors
~1e-6) is decoded by the runner with graphs and by transformers eager, and their greedy tokens
compared (not timed): that is the check that both compute the same model.
``--tp-size N`` adds rows of the runner over N tensor-parallel ranks (eager decode: graphs
are not captured under tensor parallelism; the model is saved to a temporary directory
first, since each rank reads its shard from safetensors), next to the tp 1 rows, their
greedy tokens compared the same way. The "% of limit" of a tp N row is against N GPUs'
copy rate (each rank reads its 1/N of the weights).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import ceilings, environment, failure_reason, time_ms, wall_ms  # noqa: E402

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


FULL = Sizes(8, 1024, (1, 64), 128, 64)
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


class Report:
    """Rows as they are measured; ``write`` renders markdown + JSON after every row."""

    def __init__(self, args, header: dict):
        self.args, self.header, self.rows = args, header, []

    def add(self, **row) -> None:
        self.rows.append(row)
        self.write()

    def write(self) -> None:
        if self.args.json:
            with open(self.args.json, "w") as f:
                json.dump({**self.header, "rows": self.rows}, f, indent=2)
        if self.args.out:
            with open(self.args.out, "w") as f:
                f.write(self.markdown())

    def markdown(self) -> str:
        h = self.header
        lines = ["| case | peer | ms | tokens/s | % of limit | greedy tokens vs the case's first row | note |",
                 "|---|---|---:|---:|---:|---|---|"]
        for r in self.rows:
            if r.get("error"):
                lines.append(f"| {r['case']} | {r['peer']} | n/a ({r['error']}) | | | | |")
                continue
            pct = f"{r['pct_limit']:.0f}%" if r.get("pct_limit") is not None else ""
            ms = f"{r['ms']:.3f}" if r.get("ms") is not None else ""
            rate = f"{r['tok_s']:,.0f}" if r.get("tok_s") is not None else ""
            lines.append(f"| {r['case']} | {r['peer']} | {ms} | {rate} | {pct} | "
                         f"{r.get('tokens', '')} | {r.get('note', '')} |")
        return "\n".join([
            f"## bench_runner ({h['environment']})", "", f"Command: `{h['command']}`",
            f"Model: {h['model']}; runner plan: {h['plan']}." + (
                f" Ceilings: copy {h['copy_gbs']:.0f} GB/s, bf16 matmul {h['matmul_tflops']:.0f} "
                "TFLOP/s." if h.get("copy_gbs") else ""),
            f"Decode graphs: {h.get('graphs', 'none')}.", "", "\n".join(lines), "",
            "ms: per step for decode (prefill cancelled), per call for prefill. % of limit: decode "
            "against the weight-read limit, prefill against the matmul ceiling.", ""])


def runner_decode(llm, ps: list[list[int]], steps: int, timer, reps: int):
    """(ms per decode step, greedy tokens) of ``llm``: t(steps + 1 new) - t(1 new)."""
    run = lambda n: llm.generate(ps, max_new_tokens=n, ignore_eos=True)  # noqa: E731
    t1 = timer(lambda: run(1), warmup=1, reps=reps)
    tn = timer(lambda: run(steps + 1), warmup=1, reps=reps)
    return (tn - t1) / steps, [o.token_ids for o in run(steps + 1)]


def hf_decode(model, ps: list[list[int]], steps: int, timer, reps: int, *, compiled=None):
    """Transformers' greedy loop: DynamicCache eager, or (``compiled``: the compiled forward)
    a StaticCache of the run's length. -> (ms per step, greedy tokens)."""
    from transformers import StaticCache

    dev = next(model.parameters()).device
    ids = torch.tensor(ps, device=dev)
    ctx = ids.shape[1]
    static = None if compiled is None else StaticCache(config=model.config,
                                                       max_cache_len=ctx + steps + 1)

    def greedy(n: int):
        if compiled is None:
            out = model(ids, use_cache=True, logits_to_keep=1)
            cache, step = out.past_key_values, model
        else:
            cache, step = static, compiled
            cache.reset()                     # one cache: the compiled graphs keep its buffers
            out = model(ids, past_key_values=cache, use_cache=True, logits_to_keep=1,
                        cache_position=torch.arange(ctx, device=dev))
        tok = out.logits[:, -1].argmax(-1, keepdim=True)
        toks = [tok]
        for i in range(n - 1):
            out = step(tok, past_key_values=cache, use_cache=True,
                       cache_position=torch.tensor([ctx + i], device=dev))
            tok = out.logits[:, -1].argmax(-1, keepdim=True)
            toks.append(tok)
        return torch.cat(toks, dim=1).tolist()          # a host sync, as the runner's sampling

    with torch.no_grad():
        t1 = timer(lambda: greedy(1), warmup=1, reps=reps)
        tn = timer(lambda: greedy(steps + 1), warmup=1, reps=reps)
        return (tn - t1) / steps, greedy(steps + 1)


def same_tokens(got: list[list[int]], want: list[list[int]]) -> str:
    """'identical' or 'k of B identical; first difference at token t'."""
    same = sum(g == w for g, w in zip(got, want))
    if same == len(want):
        return "identical"
    first = min(next(i for i, (a, b) in enumerate(zip(g, w)) if a != b)
                for g, w in zip(got, want) if g != w)
    return f"{same} of {len(want)} identical; first difference at token {first}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="a tiny model (CPU smoke test)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--reps", type=int, default=3, help="timed repetitions (median)")
    parser.add_argument("--no-peer", action="store_true", help="skip the transformers peers")
    parser.add_argument("--no-compile", action="store_true", help="skip transformers + torch.compile")
    parser.add_argument("--no-greedy-check", action="store_true",
                        help="skip the float32 greedy-token check against transformers")
    parser.add_argument("--out", help="write the markdown report here (after every row)")
    parser.add_argument("--json", help="write the JSON report here (after every row)")
    parser.add_argument("--tp-size", type=int, default=1, metavar="N",
                        help="also time the runner over N tensor-parallel ranks (GPUs 0..N-1)")
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
    timer = time_ms if cuda else wall_ms
    if not cuda:        # tiny CPU matrices: a thread pool only spins against other processes
        torch.set_num_threads(1)
    ceil = ceilings() if cuda else {}
    model = build_model(cfg, args.device, dtype)
    elem = torch.empty((), dtype=dtype).element_size()
    layer_params = sum(p.numel() for p in model.model.layers.parameters())
    head_params = model.lm_head.weight.numel()
    weight_bytes = (layer_params + head_params) * elem     # embeddings: one row per token read
    kv_tokens = max(sizes.prefill_prompts * sizes.prefill_len,
                    max(sizes.decode_batches) * (sizes.decode_ctx + sizes.decode_steps + 2))
    common = dict(device=args.device, dtype=dtype, max_tokens=kv_tokens,
                  max_num_seqs=max(sizes.decode_batches),
                  max_num_batched_tokens=sizes.prefill_prompts * sizes.prefill_len)
    start = time.perf_counter()
    graphs = LLM(model, cuda_graph="on" if cuda else "off", **common)
    build_s = time.perf_counter() - start
    given = list(argv if argv is not None else sys.argv[1:])
    shown = [a for i, a in enumerate(given)            # the command, less where it wrote
             if a not in ("--out", "--json") and not (i and given[i - 1] in ("--out", "--json"))]
    stats = graphs.engine.graphs.stats if graphs.engine.graphs else None
    report = Report(args, {
        "environment": environment(), "command": " ".join(["python benchmarks/bench_runner.py"] + shown),
        "model": (f"{'tiny Llama' if args.tiny else 'Llama-3-8B shape'} ({cfg['num_hidden_layers']} layers, "
                  f"hidden {cfg['hidden_size']}, {cfg['num_attention_heads']}/{cfg['num_key_value_heads']} "
                  f"heads, head dim {cfg['head_dim']}, MLP {cfg['intermediate_size']}, vocab "
                  f"{cfg['vocab_size']}; {weight_bytes / 1e9:.2f} GB of weights read per step), random "
                  f"{str(dtype).removeprefix('torch.')} weights, {args.device}"),
        "plan": f"prefill {graphs.plan.prefill_backend}, extend {graphs.plan.extend_backend}, decode "
                f"{graphs.plan.decode_backend}, page "
                f"{graphs.plan.run.page_size}",
        "graphs": (f"buckets {stats['buckets']}, context tiers "
                   f"{ {b: list(r) for b, r in stats['reaches'].items() if len(r) > 1} or 'none'}, "
                   f"captured in {stats['capture_s']:.1f} s "
                   f"(LLM built in {build_s:.1f} s), {stats['memory_bytes'] / 2**30:.2f} GiB"
                   if stats else "none (CPU)"),
        "graph_stats": stats, "copy_gbs": ceil.get("copy_gbs"),
        "matmul_tflops": ceil.get("matmul_tflops"), "weight_bytes": weight_bytes})
    eager = LLM(model, cuda_graph="off", **common)
    tp = tp_llm(model, args.tp_size, common) if args.tp_size > 1 else None
    tp_name = f"attnkit LLM, eager, tp {args.tp_size}"

    def limit(b: int, ranks: int = 1) -> float | None:
        return ranks * b * ceil["copy_gbs"] * 1e9 / weight_bytes if ceil else None

    # prefill: the runner (graphs change nothing here) and transformers' forward
    batch = prompts(sizes.prefill_prompts, sizes.prefill_len, cfg["vocab_size"], 1)
    n_tok = sizes.prefill_prompts * sizes.prefill_len
    h, d, layers = cfg["num_attention_heads"], cfg["head_dim"], cfg["num_hidden_layers"]
    flops = (2 * layer_params * n_tok + 2 * head_params * sizes.prefill_prompts
             + 4 * layers * h * d * n_tok * (sizes.prefill_len + 1) // 2)
    case = f"prefill {sizes.prefill_prompts}x{sizes.prefill_len}"
    ms = timer(lambda: eager.generate(batch, max_new_tokens=1, ignore_eos=True), warmup=1, reps=args.reps)
    report.add(case=case, peer="attnkit LLM", ms=ms, tok_s=n_tok / ms * 1e3,
               pct_limit=100 * flops / ms / 1e9 / ceil["matmul_tflops"] if ceil else None)
    if tp is not None:
        ms = timer(lambda: tp.generate(batch, max_new_tokens=1, ignore_eos=True), warmup=1,
                   reps=args.reps)
        report.add(case=case, peer=f"attnkit LLM, tp {args.tp_size}", ms=ms, tok_s=n_tok / ms * 1e3,
                   pct_limit=100 * flops / ms / 1e9 / ceil["matmul_tflops"] / args.tp_size
                   if ceil else None)
    if not args.no_peer:
        ids = torch.tensor(batch, device=args.device)
        with torch.no_grad():
            ms = timer(lambda: model(ids, use_cache=False, logits_to_keep=1).logits.argmax(-1).tolist(),
                       warmup=1, reps=args.reps)
        report.add(case=case, peer="transformers eager", ms=ms, tok_s=n_tok / ms * 1e3,
                   pct_limit=100 * flops / ms / 1e9 / ceil["matmul_tflops"] if ceil else None)

    references: dict[str, list] = {}          # case -> the runner's (graphs) greedy tokens
    for b in sizes.decode_batches:
        case = f"decode B={b} ctx={sizes.decode_ctx}, {sizes.decode_steps} steps"
        ps = prompts(b, sizes.decode_ctx, cfg["vocab_size"], 2)
        peers = [("attnkit LLM, CUDA graphs", lambda: runner_decode(graphs, ps, sizes.decode_steps, timer, args.reps))
                 if cuda else None,
                 ("attnkit LLM, eager", lambda: runner_decode(eager, ps, sizes.decode_steps, timer, args.reps))]
        if tp is not None:
            peers.append((tp_name, lambda: runner_decode(tp, ps, sizes.decode_steps, timer, args.reps)))
        if not args.no_peer:
            peers.append(("transformers eager", lambda: hf_decode(model, ps, sizes.decode_steps, timer, args.reps)))
        for entry in peers:
            if entry is None:
                report.add(case=case, peer="attnkit LLM, CUDA graphs", error="CPU: no CUDA graphs")
                continue
            name, fn = entry
            try:
                ms, toks = fn()
            except Exception as exc:  # noqa: BLE001 -- report, keep the other rows
                report.add(case=case, peer=name, error=failure_reason(exc))
                continue
            reference = references.setdefault(case, toks)
            rate = b / ms * 1e3
            ranks = args.tp_size if name == tp_name else 1
            report.add(case=case, peer=name, ms=ms, tok_s=rate,
                       pct_limit=100 * rate / limit(b, ranks) if limit(b) else None,
                       tokens=same_tokens(toks, reference))
    if not args.no_peer and not args.no_compile and cuda:
        compiled_rows(model, sizes, cfg, timer, args.reps, report, limit, references)
    if cuda and not args.no_peer and not args.no_greedy_check:
        del model, graphs, eager, tp
        torch.cuda.empty_cache()
        greedy_check_rows(cfg, sizes, common, report)
    print(report.markdown())
    return 0


def greedy_check_rows(cfg: dict, sizes: Sizes, common: dict, report: Report) -> None:
    """float32 weights of the same shape: the runner (CUDA graphs) and transformers eager,
    greedy tokens compared (see the module docstring)."""
    from attnkit.runner import LLM

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        model = build_model(cfg, "cuda", torch.float32)
        llm = LLM(model, cuda_graph="on", **{**common, "dtype": torch.float32})
    except Exception as exc:  # noqa: BLE001
        report.add(case="greedy check fp32", peer="attnkit LLM, CUDA graphs", error=failure_reason(exc))
        return
    for b in sizes.decode_batches:
        case = f"greedy check fp32 B={b} ctx={sizes.decode_ctx}, {sizes.decode_steps} steps"
        ps = prompts(b, sizes.decode_ctx, cfg["vocab_size"], 2)
        try:
            ours = [o.token_ids for o in llm.generate(ps, max_new_tokens=sizes.decode_steps + 1,
                                                       ignore_eos=True)]
            _, theirs = hf_decode(model, ps, sizes.decode_steps, wall_ms, 1)
        except Exception as exc:  # noqa: BLE001
            report.add(case=case, peer="transformers eager", error=failure_reason(exc))
            continue
        report.add(case=case, peer="transformers eager vs attnkit LLM, CUDA graphs", ms=None,
                   tok_s=None, tokens=same_tokens(theirs, ours), note="not timed")


def tp_llm(model, size: int, common: dict):
    """The runner over ``size`` tensor-parallel ranks: the model saved to a temporary
    directory (each rank reads its shard; removed at exit), decode eager."""
    import atexit
    import shutil
    import tempfile

    from attnkit.runner import LLM

    path = tempfile.mkdtemp(prefix="bench_runner_tp_")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    model.save_pretrained(path)
    return LLM(path, tp_size=size, cuda_graph="off", **common)


def compiled_rows(model, sizes: Sizes, cfg: dict, timer, reps: int, report: Report, limit,
                  references: dict) -> None:
    """transformers + StaticCache + torch.compile(reduce-overhead): last, as compiling is slow."""
    try:
        compiled = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
    except Exception as exc:  # noqa: BLE001
        report.add(case="decode", peer="transformers static + compile", error=failure_reason(exc))
        return
    for b in sizes.decode_batches:
        case = f"decode B={b} ctx={sizes.decode_ctx}, {sizes.decode_steps} steps"
        ps = prompts(b, sizes.decode_ctx, cfg["vocab_size"], 2)
        reference = references.get(case)
        try:
            start = time.perf_counter()
            hf_decode(model, ps, 2, wall_ms, 1, compiled=compiled)       # compiles for B
            compile_s = time.perf_counter() - start
            ms, toks = hf_decode(model, ps, sizes.decode_steps, timer, reps, compiled=compiled)
        except Exception as exc:  # noqa: BLE001
            report.add(case=case, peer="transformers static + compile", error=failure_reason(exc))
            continue
        rate = b / ms * 1e3
        report.add(case=case, peer="transformers static + compile", ms=ms, tok_s=rate,
                   pct_limit=100 * rate / limit(b) if limit(b) else None,
                   tokens=same_tokens(toks, reference) if reference else "",
                   note=f"compile + first calls {compile_s:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
