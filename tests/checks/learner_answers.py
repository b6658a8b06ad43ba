"""What the tests of several chapters' checks share: the seeds the graders' hidden tests use,
a stub, and a correct answer written the way a learner would."""

import torch

HIDDEN_SEEDS = (1, 2, 7)
SEEDS = (0, *HIDDEN_SEEDS)  # the visible cases and the hidden ones


def learner_nw(queries, keys, values, bandwidth):
    """A correct answer written the way a learner would: log-space scores and a softmax."""
    scores = -(((queries[:, None] - keys[None, :]) / bandwidth) ** 2) / 2
    return torch.softmax(scores, dim=1) @ values


def stub(*args):
    raise NotImplementedError
