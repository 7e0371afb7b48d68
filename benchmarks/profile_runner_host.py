"""Host (Python) overhead of the runner's decode step, measured with tiny dims (CPU by default).

    python benchmarks/profile_runner_host.py                     # table: torch_native, sdpa x B 1, 8
    python benchmarks/profile_runner_host.py --profile sdpa:8    # + cProfile of that case
    python benchmarks/profile_runner_host.py --layers 32 --steps 60 --backends sdpa
    python benchmarks/profile_runner_host.py --device cuda --dtype bf16 --head-dim 64 \
        --backends torch_native,sdpa,triton                      # triton serves head dim >= 64

A Llama-shaped model with many layers but tiny widths (hidden 64, 4 q / 2 KV heads, head
dim 16, MLP 128, vocab 128) is built with transformers, saved to a temp dir and loaded with
``attnkit.runner.Engine``. With widths this small every op costs about its dispatch, so a
step's wall time is almost all host work: the model code, the per-layer input checks, the
per-step metadata build and ``prepare``. Per case:
  step ms     median wall time of ``engine.decode`` (B live sequences, one token each);
  layer ms    the per-layer part, (step(L layers) - step(2 layers)) / (L - 2): what each
              extra layer costs, free of the per-step fixed work;
  fixed ms    step - L * layer: build_batch, prepare, embedding, LM head, engine bookkeeping;
  prep ms     median of ``build_batch`` + ``backend.prepare`` alone (part of fixed).
The scheduler and sampling (``LLM.generate``) are not in these numbers: they are per step,
not per layer. Threads are pinned to 1 so runs compare. On CUDA each timed step ends in
``torch.cuda.synchronize()``; with these widths the GPU work is a few microseconds per
kernel, so the step time is still the host's.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import tempfile
import time

import torch

TINY = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=4096,
            tie_word_embeddings=False)
PROMPT = 16


def save_model(layers: int, path: str, head_dim: int = TINY["head_dim"]) -> str:
    """A random-weight LlamaForCausalLM with ``layers`` layers saved to ``path``."""
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(num_hidden_layers=layers, **{**TINY, "head_dim": head_dim})
    model = transformers.LlamaForCausalLM(config)
    model.save_pretrained(path)
    return path


def make_engine(path: str, backend: str, batch: int, steps: int, *, device: str = "cpu",
                dtype: str = "fp32"):
    from attnkit.runner import Engine

    engine = Engine.from_pretrained(path, backend=backend, page_size=16, device=device,
                                    dtype=dtype, max_tokens=batch * (PROMPT + steps + 64))
    g = torch.Generator().manual_seed(1)
    engine.prefill(torch.randint(0, TINY["vocab_size"], (batch, PROMPT), generator=g).tolist())
    return engine


def decode_times(engine, batch: int, steps: int) -> list[float]:
    """Wall ms of each of ``steps`` decode steps (after 3 warm-up steps)."""
    tokens = [1] * batch
    sync = torch.cuda.synchronize if engine.device.type == "cuda" else (lambda: None)
    out = []
    for i in range(steps + 3):
        sync()
        t0 = time.perf_counter()
        engine.decode(tokens)
        sync()
        if i >= 3:
            out.append((time.perf_counter() - t0) * 1e3)
    return out


def prepare_ms(engine, batch: int, reps: int = 50) -> float:
    """Median ms of build_batch + backend.prepare for a decode step of the live sequences
    (metadata only: nothing is written, so it can repeat)."""
    from attnkit.backends.batch import Request, build_batch

    ids = engine.ids
    reqs = [Request(prefix_len=len(engine.tokens(i)) - 1, num_new=1,
                    block_table=engine.sequence(i).pages) for i in ids]
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        meta = build_batch(reqs, page_size=engine.page_size, device=engine.device)
        engine.backend.prepare(meta, engine.cache)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def profile(engine, batch: int, steps: int, top: int) -> str:
    tokens = [1] * batch
    engine.decode(tokens)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        engine.decode(tokens)
    prof.disable()
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf).strip_dirs()
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--steps", type=int, default=40, help="timed decode steps per case")
    ap.add_argument("--backends", default="torch_native,sdpa")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--profile", default=None, metavar="BACKEND:B",
                    help="also print a cProfile of that case (top functions)")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--head-dim", type=int, default=TINY["head_dim"])
    args = ap.parse_args(argv)
    run = dict(device=args.device, dtype=args.dtype)
    torch.set_num_threads(1)
    backends = args.backends.split(",")
    batches = [int(b) for b in args.batches.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        big = save_model(args.layers, f"{tmp}/big", args.head_dim)
        small = save_model(2, f"{tmp}/small", args.head_dim)
        print(f"torch {torch.__version__}, 1 thread, {args.device}, {args.dtype}, head dim "
              f"{args.head_dim}; decode after a "
              f"{PROMPT}-token prompt; {args.layers} vs 2 layers, median of {args.steps} steps")
        print(f"{'backend':<13} {'B':>2} {'step ms':>8} {'layer ms':>9} {'fixed ms':>9} {'prep ms':>8}")
        for backend in backends:
            for b in batches:
                eng = make_engine(big, backend, b, args.steps, **run)
                eng2 = make_engine(small, backend, b, args.steps, **run)
                # interleave the two models' runs so machine noise hits both alike
                t_big, t_small = [], []
                for _ in range(2):
                    t_big += decode_times(eng, b, args.steps // 2)
                    t_small += decode_times(eng2, b, args.steps // 2)
                step, step2 = statistics.median(t_big), statistics.median(t_small)
                layer = (step - step2) / (args.layers - 2)
                print(f"{backend:<13} {b:>2} {step:8.2f} {layer:9.3f} "
                      f"{step - args.layers * layer:9.2f} {prepare_ms(eng, b):8.3f}")
        if args.profile:
            backend, b = args.profile.split(":")
            eng = make_engine(big, backend, int(b), args.steps, **run)
            print(f"\ncProfile, {backend} B={b}, {args.steps} decode steps")
            print(profile(eng, int(b), args.steps, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
