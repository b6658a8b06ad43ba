"""Random weights for `transformers` layers that the tests compare with the course's."""

import torch


def randomized(module, seed, dtype=torch.float64):
    """The module in dtype, eval mode, every parameter (norms included) drawn N(0, 0.5^2)."""
    module = module.to(dtype).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(
                0.5 * torch.randn(parameter.shape, generator=generator, dtype=torch.float64)
            )
    return module
