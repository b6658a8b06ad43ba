"""Check of chapter 17's exercise 6: which layer's keys and values each layer reads under
Gemma 3n's cross-layer KV sharing."""

import torch

from .. import costs
from .core import CheckFailed, integers, passed, run, self_check


def hybrid_layer_types(n_layers, every):
    """transformers' layer_types: each `every`-th layer full, the others sliding. Chapter 17."""
    return [
        "full_attention" if (i + 1) % every == 0 else "sliding_attention" for i in range(n_layers)
    ]


def _sharing_cases(seed):
    """(case, layer_types, num_kv_shared_layers): Gemma 3n's stacks, then patterns where
    the type of the last layers before sharing differs from the shared ones' order."""
    sliding, full = "sliding_attention", "full_attention"
    if not seed:
        return [
            (
                "Gemma 3n E4B: 35 layers, 4 sliding then 1 full, the last 15 shared",
                hybrid_layer_types(35, 5),
                15,
            ),
            ("Gemma 3n E2B: 30 layers, the last 10 shared", hybrid_layer_types(30, 5), 10),
            (
                "full, sliding, sliding, full, sliding, sliding; the last 3 shared",
                [full, sliding, sliding] * 2,
                3,
            ),
            ("sliding, full, full, sliding; the last 1 shared", [sliding, full, full, sliding], 1),
            ("4 layers, nothing shared", [sliding, full] * 2, 0),
        ]
    cases = []
    sizes = zip(integers(seed, 4, 3, 30, 600), integers(seed, 4, 2, 6, 601))
    for n, (layers, every) in enumerate(sizes):
        types = hybrid_layer_types(layers, every)
        first = max(every, layers - integers(seed, 1, 1, layers, 602 + n)[0])
        cases.append(
            (
                f"random case {n}: {layers} layers, 1 full in {every}, the last {layers - first} "
                "shared",
                types,
                layers - first,
            )
        )
    return cases


def _sharing_mistakes(layer_types, num_shared):
    """(what a typical wrong answer returns, why it is wrong)."""
    first = len(layer_types) - num_shared
    own = list(range(first))

    def last_of(kind, before):
        return max(j for j in range(before) if layer_types[j] == kind)

    mistakes = [
        (
            own + [first - 1] * num_shared,
            "a shared layer reads the last layer of its OWN type (sliding or full) before "
            "sharing starts, not the last layer before sharing whatever its type",
        ),
        (
            own
            + [
                min(j for j in range(first) if layer_types[j] == layer_types[i])
                for i in range(first, len(layer_types))
            ],
            "a shared layer reads the LAST earlier layer of its type that keeps its own keys "
            "and values, not the first",
        ),
        (
            own + [last_of(layer_types[i], i) for i in range(first, len(layer_types))],
            "only layers before sharing starts keep keys and values: a shared layer cannot "
            "read another shared layer (it computes none)",
        ),
        (
            [None] * first
            + [last_of(layer_types[i], first) for i in range(first, len(layer_types))],
            "a layer that keeps its own keys and values reads itself: its entry is its own index",
        ),
    ]
    if 0 < first - 1:  # sharing one layer too early or too late
        early = first - 1
        mistakes.append(
            (
                list(range(early))
                + [
                    max(j for j in range(early) if layer_types[j] == layer_types[i])
                    if any(layer_types[j] == layer_types[i] for j in range(early))
                    else i
                    for i in range(early, len(layer_types))
                ],
                "the last num_kv_shared_layers layers share, no more: sharing starts at layer "
                "len(layer_types) - num_kv_shared_layers",
            )
        )
    if num_shared > 1:  # sharing one layer too late
        late = first + 1
        mistakes.append(
            (
                list(range(late))
                + [last_of(layer_types[i], late) for i in range(late, len(layer_types))],
                "the last num_kv_shared_layers layers share, no fewer: sharing starts at layer "
                "len(layer_types) - num_kv_shared_layers",
            )
        )
    return mistakes


def _sharing_fallback(layer_types, first, layer, source):
    """Why layer `layer` cannot read `source`, when no typical mistake explains the answer."""
    if not isinstance(source, int) or not 0 <= source < len(layer_types):
        return f"each entry is the index of a layer, 0 to {len(layer_types) - 1}"
    if layer < first:
        return "a layer before sharing starts keeps and reads its own: its entry is its own index"
    if source >= first:
        return f"layer {source} is shared itself and computes no keys or values"
    if layer_types[source] != layer_types[layer]:
        return (
            f"layer {source} is {layer_types[source]}: a shared layer reads a layer of its own "
            "type, whose keys are rotated with the same RoPE base and kept for the same window"
        )
    return None


@self_check
def check_kv_sources(fn, seed=0):
    """Check fn(layer_types, num_kv_shared_layers) -> for each layer the index of the layer
    whose keys and values it attends to, by Gemma 3n's rule: the last num_kv_shared_layers
    layers keep none and read those of the last earlier layer of the same type before the
    shared ones; every other layer reads its own. Chapter 17, exercise 6."""
    cases = _sharing_cases(seed)
    for case, layer_types, num_shared in cases:
        expected = list(costs.kv_sharing(layer_types, num_shared))
        got = run(
            fn,
            (list(layer_types), num_shared),
            case,
            forbidden=(costs.kv_sharing, costs.attention_costs),
        )
        if isinstance(got, torch.Tensor):
            got = got.tolist()
        if not isinstance(got, (list, tuple)):
            raise CheckFailed(
                f"case '{case}': your function returned {type(got).__name__}, expected a "
                "list with one layer index per layer"
            )
        got = list(got)
        if len(got) != len(layer_types):
            raise CheckFailed(
                f"case '{case}': you return {len(got)} indices for {len(layer_types)} layers: "
                "one per layer, the non-shared ones included"
            )
        if got != expected:
            wrong_at = next(i for i, (a, b) in enumerate(zip(got, expected)) if a != b)
            hints = [
                why for wrong, why in _sharing_mistakes(layer_types, num_shared) if wrong == got
            ] or [
                _sharing_fallback(
                    layer_types, len(layer_types) - num_shared, wrong_at, got[wrong_at]
                )
            ]
            raise CheckFailed(
                f"case '{case}': layer {wrong_at} ({layer_types[wrong_at]}) reads layer "
                f"{got[wrong_at]!r} in your answer, layer {expected[wrong_at]} in Gemma 3n"
                + (f": {hints[0]}" if hints[0] else "")
            )
    passed("your cross-layer KV sharing", len(cases))
