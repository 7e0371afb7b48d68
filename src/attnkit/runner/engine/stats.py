"""Counters the scheduler keeps: per request (latency, preemptions) and per run (throughput).

Throughput is wall-clock time of whole steps (each step ends with a host sync when its
tokens are sampled). A step that prefills anything counts as prefill time, decode tokens
riding in it included (``mixed_decode_tokens``); the decode rate is measured on decode-only
steps, so neither rate is inflated by the other phase.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(slots=True)
class RequestStats:
    """One request. Times are ``time.perf_counter()`` seconds; None until they happen."""
    seed: int | None
    num_prompt_tokens: int
    num_output_tokens: int = 0
    num_computed_tokens: int = 0     # tokens run through the model, recomputation included
    num_preemptions: int = 0
    arrival_s: float = 0.0
    first_token_s: float | None = None
    finish_s: float | None = None

    @property
    def ttft_s(self) -> float | None:
        """Seconds from arrival to the first new token."""
        return None if self.first_token_s is None else self.first_token_s - self.arrival_s

    @property
    def latency_s(self) -> float | None:
        """Seconds from arrival to finish."""
        return None if self.finish_s is None else self.finish_s - self.arrival_s

    def to_dict(self) -> dict:
        out = {k: v for k, v in asdict(self).items() if not k.endswith("_s")}
        return {**out, "ttft_s": self.ttft_s, "latency_s": self.latency_s}


@dataclass(slots=True)
class RunStats:
    """A scheduler's run: steps, tokens and seconds per phase, preemptions."""
    steps: int = 0
    prefill_steps: int = 0
    prefill_tokens: int = 0          # prompt (and recomputed) tokens, all steps
    prefill_s: float = 0.0           # wall time of steps that prefilled anything
    decode_tokens: int = 0           # one-token decodes in decode-only steps
    decode_s: float = 0.0            # wall time of decode-only steps
    mixed_decode_tokens: int = 0     # decodes that shared a step with a prefill
    preemptions: int = 0
    max_running: int = 0

    @property
    def prefill_tok_s(self) -> float | None:
        return self.prefill_tokens / self.prefill_s if self.prefill_s > 0 else None

    @property
    def decode_tok_s(self) -> float | None:
        return self.decode_tokens / self.decode_s if self.decode_s > 0 else None

    def add_step(self, *, prefill: int, decode: int, seconds: float) -> None:
        self.steps += 1
        if prefill:
            self.prefill_steps += 1
            self.prefill_tokens += prefill
            self.prefill_s += seconds
            self.mixed_decode_tokens += decode
        else:
            self.decode_tokens += decode
            self.decode_s += seconds

    def summary(self) -> str:
        """One line: 'prefill 8192 tok in 0.21 s (39.0k tok/s) | decode ...'."""
        def rate(tokens: int, seconds: float, per_s: float | None) -> str:
            return f"{tokens} tok in {seconds:.2f} s ({_si(per_s)} tok/s)" if per_s else f"{tokens} tok"
        line = (f"prefill {rate(self.prefill_tokens, self.prefill_s, self.prefill_tok_s)} | "
                f"decode {rate(self.decode_tokens, self.decode_s, self.decode_tok_s)}")
        if self.mixed_decode_tokens:
            line += f" (+{self.mixed_decode_tokens} decoded in prefill steps)"
        return line + f" | {self.steps} steps, {self.preemptions} preemptions"

    def to_dict(self) -> dict:
        return {**asdict(self), "prefill_tok_s": self.prefill_tok_s,
                "decode_tok_s": self.decode_tok_s}


def _si(x: float) -> str:
    return f"{x / 1e3:.1f}k" if x >= 1e4 else f"{x:.1f}"
