"""The checks of chapter 12's exercises 1 and 2 (the online-softmax update, the causal tiles)
accept correct answers written independently and name the usual mistakes."""

import pytest
import torch
from learner_answers import HIDDEN_SEEDS

import attention_course
from attention_course import checks
from attention_course.checks import CheckFailed


def update_by_logaddexp(running_max, running_sum, block):
    """The log of the new sum is logaddexp(old log-sum, the block's)."""
    new_max = torch.maximum(running_max, block.amax(dim=-1))
    total = torch.logaddexp(
        running_max.double() + running_sum.double().log(), torch.logsumexp(block.double(), dim=-1)
    )
    new_sum = torch.nan_to_num(torch.exp(total - new_max.double()))
    return new_max, new_sum.to(running_sum.dtype)


def causal_tiles_by_entries(n_queries, n_keys, query_block, key_block):
    return {
        (i // query_block, j // key_block)
        for i in range(n_queries)
        for j in range(min(i + 1, n_keys))
    }


INDEPENDENT_ANSWERS = [
    ("check_online_softmax_update", update_by_logaddexp),
    ("check_causal_tiles", causal_tiles_by_entries),
]


@pytest.mark.parametrize("seed", (0, *HIDDEN_SEEDS))
@pytest.mark.parametrize(
    "check, answer", INDEPENDENT_ANSWERS, ids=[name for name, _ in INDEPENDENT_ANSWERS]
)
def test_checks_pass_independent_answers(check, answer, seed, capsys):
    getattr(checks, check)(answer, seed=seed)
    assert capsys.readouterr().out.startswith("Correct")


def update_without_guard(running_max, running_sum, block):
    new_max = torch.maximum(running_max, block.amax(dim=-1))
    return new_max, (
        running_sum * torch.exp(running_max - new_max) + torch.exp(block - new_max[:, None]).sum(-1)
    )


def test_tiled_attention_checks_explain_the_usual_mistakes():
    def guarded(update):
        def safe(running_max, running_sum, block):
            if torch.isneginf(block).all():
                return running_max, running_sum
            return update(running_max, running_sum, block)

        return safe

    with pytest.raises(CheckFailed, match="exp\\(-inf \\+ inf\\) is NaN"):
        checks.check_online_softmax_update(update_without_guard)
    with pytest.raises(CheckFailed, match="must be multiplied by"):
        checks.check_online_softmax_update(
            guarded(
                lambda m, l, s: (
                    torch.maximum(m, s.amax(-1)),
                    l + torch.exp(s - torch.maximum(m, s.amax(-1))[:, None]).sum(-1),
                )
            )
        )
    with pytest.raises(CheckFailed, match="upside down"):
        checks.check_online_softmax_update(
            guarded(
                lambda m, l, s: (
                    torch.maximum(m, s.amax(-1)),
                    l * torch.exp(torch.maximum(m, s.amax(-1)) - m)
                    + torch.exp(s - torch.maximum(m, s.amax(-1))[:, None]).sum(-1),
                )
            )
        )
    with pytest.raises(CheckFailed, match="relative to the running maximum"):
        checks.check_online_softmax_update(
            guarded(lambda m, l, s: (torch.maximum(m, s.amax(-1)), l + torch.exp(s).sum(-1)))
        )
    every = lambda n_q, n_k, b_q, b_k: [
        (q, k) for q in range(-(-n_q // b_q)) for k in range(-(-n_k // b_k))
    ]
    with pytest.raises(CheckFailed, match="kept all 4 tiles"):
        checks.check_causal_tiles(every)
    with pytest.raises(CheckFailed, match="compare positions"):
        checks.check_causal_tiles(lambda *sizes: [(q, k) for q, k in every(*sizes) if k <= q])
    with pytest.raises(CheckFailed, match=r"tile \(0, 0\) .* missing"):
        checks.check_causal_tiles(lambda *sizes: [(q, k) for q, k in every(*sizes) if k < q])
    with pytest.raises(CheckFailed, match="calls `tile_schedule`"):
        checks.check_causal_tiles(
            lambda n_q, n_k, b_q, b_k: attention_course.tiled.tile_schedule(n_q, n_k, b_q, True)
        )


def test_causal_tiles_check_names_the_wrong_query_or_key_of_a_tile():
    def by_first_query(n_queries, n_keys, query_block, key_block):
        pairs = []
        for q, first_query in enumerate(range(0, n_queries, query_block)):
            for k, first_key in enumerate(range(0, n_keys, key_block)):
                if first_key <= first_query:
                    pairs.append((q, k))
        return pairs

    def by_last_key(n_queries, n_keys, query_block, key_block):
        pairs = []
        for q, first_query in enumerate(range(0, n_queries, query_block)):
            last_query = min(first_query + query_block, n_queries) - 1
            for k, first_key in enumerate(range(0, n_keys, key_block)):
                if min(first_key + key_block, n_keys) - 1 <= last_query:
                    pairs.append((q, k))
        return pairs

    with pytest.raises(CheckFailed, match="with the block's first query"):
        checks.check_causal_tiles(by_first_query)
    with pytest.raises(CheckFailed, match="drops the tiles on the diagonal"):
        checks.check_causal_tiles(by_last_key)
