"""Comparison helper shared by the runner tests."""
import torch

RTOL = 1e-4


def close(actual: torch.Tensor, expected: torch.Tensor, *, rtol: float = RTOL) -> None:
    """Max abs error relative to the largest expected logit: <= rtol (1e-4, fp32)."""
    err = (actual - expected).abs().max().item() / expected.abs().max().item()
    assert err <= rtol, f"relative error {err:.2e} > {rtol:.0e}"
