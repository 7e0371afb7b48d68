"""The comparison every engine tier makes: greedy tokens equal, logprobs within a bound."""
from __future__ import annotations

LOGPROB_TOLERANCE = 1e-4


def differences(ours: list[dict], theirs: list[dict]) -> tuple[int, int, float]:
    """-> (tokens equal, tokens compared, max |delta logprob| over the tokens both list).
    Each side: per prompt {"tokens": [...], "logprobs": [{token: logprob}, ...]}. After the
    first differing token the sequences continue on different contexts, so only the prefix up
    to and including it is compared."""
    equal = total = 0
    worst = 0.0
    for a, b in zip(ours, theirs, strict=True):
        for step, (ta, tb) in enumerate(zip(a["tokens"], b["tokens"], strict=True)):
            total += 1
            la, lb = a["logprobs"][step], b["logprobs"][step]
            shared = set(la) & set(lb)
            worst = max([worst, *(abs(la[t] - lb[t]) for t in shared)])
            if ta != tb:
                total += len(a["tokens"]) - step - 1
                break
            equal += 1
    return equal, total, worst


def verdict(ours: list[dict], theirs: list[dict]) -> str | None:
    """None when they agree (every token, logprobs within LOGPROB_TOLERANCE); else why not."""
    equal, total, worst = differences(ours, theirs)
    if equal == total and worst <= LOGPROB_TOLERANCE:
        return None
    return (f"{equal} of {total} greedy tokens equal, max |delta logprob| {worst:.3g} "
            f"(bound {LOGPROB_TOLERANCE})")
