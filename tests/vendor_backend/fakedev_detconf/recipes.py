"""Recipes for the fakedev list's own operations (torch.cumsum has one in detconf already)."""
import torch

from detconf.conformance.kit import Example
from detconf.engine.program import recipe


def scaled_sum_op(x, *, scale, dim):
    return torch.sum(x * scale, dim=dim)


@recipe("fakedev_detconf.scaled_sum", targets=("aten.sum",))
def scaled_sum(draw, entry, case, device):
    ex = Example(draw, entry, case, device)
    dtype = ex.choice((torch.float32, torch.float64))
    ex.tensor("x", (ex.kwarg("rows", (1, 3, 8)), ex.kwarg("cols", (2, 5))), dtype)
    return ex.program(scaled_sum_op, grads=("x",), scale=ex.kwarg("scale", (0.5, 2.0)), dim=ex.kwarg("dim", (0, 1)))
