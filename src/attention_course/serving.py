"""Attention in a serving engine (chapter 19).

- `ContinuousBatcher`: continuous batching (Orca, Yu et al. 2022) of greedy requests over a
  `PagedKVCache` (module `paging`): at every step it admits waiting requests while the pool
  has blocks for them (sharing the prefix they have in common with a running request),
  preempts the newest when decoding runs out of blocks, runs prefill and decode in one
  forward pass over the ragged batch, and retires the requests that finished;
- `generate_continuous`: greedy decoding of many prompts that way; each request's tokens
  equal `TinyDecoder.generate` run on it alone.
"""

import collections
import dataclasses

import torch

from . import _kernels
from ._kernels import blocks_for
from ._shapes import (
    TOKEN_ID_DTYPES,
    is_integer,
    require_instance,
    require_int,
    require_integer,
    shape_of,
    type_name,
)
from .decoding import TinyDecoder
from .paging import PagedKVCache


def _check_model(model):
    """A TinyDecoder whose every layer reads every earlier token at its own position."""
    require_instance("model", model, TinyDecoder, "a TinyDecoder")
    config = model.config
    if config.window is not None:
        raise ValueError(
            f"model reads through a sliding window (window={config.window}, sinks="
            f"{config.sinks}): the paged cache keeps every token; decode it with "
            "model.generate"
        )
    scaling = config.rope_scaling or {}
    if scaling.get("rope_type", scaling.get("type")) == "dynamic":
        raise ValueError(
            "model uses 'dynamic' RoPE scaling, whose angles depend on the longest position "
            "of each pass: in a ragged batch that is another request's; decode it with "
            "model.generate"
        )


def _check_prompt(name, prompt, model):
    """prompt (n,), n >= 1, int64 or int32 ids below model's vocab_size, on its device."""
    require_integer(name, prompt, 1, what="integer token ids")
    weight = model.embed.weight
    if prompt.dtype not in TOKEN_ID_DTYPES or not prompt.numel() or prompt.device != weight.device:
        raise ValueError(
            f"{name} {shape_of(prompt)} ({prompt.dtype}, {prompt.device}) must hold at least "
            f"one token id, int64 or int32, on the model's device ({weight.device})"
        )
    if prompt.min() < 0 or prompt.max() >= model.vocab_size:
        raise ValueError(
            f"{name} {shape_of(prompt)} must lie in [0, vocab_size={model.vocab_size}), got "
            f"{prompt.min().item()} to {prompt.max().item()}"
        )


def _check_stop(stop_id, model):
    """None, or a token id the model can produce."""
    if stop_id is None:
        return
    require_int("stop_id", stop_id, 0)
    if stop_id >= model.vocab_size:
        raise ValueError(
            f"stop_id={stop_id} must lie in [0, vocab_size={model.vocab_size}): the model "
            "never produces it"
        )


def _footprint(prompt, max_new_tokens, block_size):
    """The most blocks a request holds: its prompt and new tokens but the last."""
    return blocks_for(len(prompt) + max_new_tokens - 1, block_size) if max_new_tokens else 0


def _check_fits(name, prompt, max_new_tokens, num_blocks, block_size):
    """A request that could never run, even alone, raises ValueError."""
    needed = _footprint(prompt, max_new_tokens, block_size)
    if needed > num_blocks:
        raise ValueError(
            f"{name} {shape_of(prompt)} with max_new_tokens={max_new_tokens} needs up to "
            f"{needed} blocks of block_size={block_size}, more than num_blocks={num_blocks}"
        )


def _common_prefix(tokens, other, limit):
    """How many leading tokens two lists share, at most limit."""
    length = 0
    while length < limit and tokens[length] == other[length]:
        length += 1
    return length


@dataclasses.dataclass(eq=False)
class _Request:
    """One request: its prompt, its tokens so far (the prompt's, then new ones), its cache
    sequence while admitted and how many of its tokens the cache holds."""

    id: int
    prompt: torch.Tensor
    tokens: list
    max_new_tokens: int
    sequence: int = None
    computed: int = 0
    slots: torch.Tensor = None


StepRecord = collections.namedtuple(
    "StepRecord", "admitted preempted running finished tokens free_blocks"
)
StepRecord.__doc__ = """What one step of a ContinuousBatcher did: admitted, preempted, running
(the requests of its forward pass, in order) and finished, lists of request ids; tokens, how
many tokens the forward pass read; free_blocks, the pool's free blocks after it. Chapter 19."""


class ContinuousBatcher:
    """Continuous batching of greedy requests over a PagedKVCache.

    ContinuousBatcher(model, num_blocks, block_size=16, stop_id=None): a TinyDecoder (no
    sliding window, sinks or "dynamic" RoPE scaling: ValueError) and a pool of num_blocks
    blocks per layer, `cache`. add_request(prompt (n,), max_new_tokens) queues a request ->
    its id. Each step() reserves a slot for every running request's next token, oldest first
    (preempting the newest, to be computed again later, while blocks run out), admits
    waiting requests in order while blocks remain (each forked from the running request with
    which it shares the longest prefix), runs one forward pass over all their new tokens,
    appends a greedy token to each and retires those that are done (max_new_tokens reached,
    or stop_id produced) -> a StepRecord. output(request) -> its prompt and new tokens so
    far; `done`: no request waits or runs. Chapter 19."""

    def __init__(self, model, num_blocks, block_size=16, stop_id=None):
        _check_model(model)
        require_int("num_blocks", num_blocks, 1)
        require_int("block_size", block_size, 1)
        _check_stop(stop_id, model)
        self._start(model, num_blocks, block_size, stop_id)

    @classmethod
    def _of_checked(cls, model, num_blocks, block_size, stop_id):
        """A batcher for arguments generate_continuous has checked."""
        batcher = cls.__new__(cls)
        batcher._start(model, num_blocks, block_size, stop_id)
        return batcher

    def _start(self, model, num_blocks, block_size, stop_id):
        weight = model.blocks[0].attention.q_proj.weight
        self.model, self.stop_id = model, stop_id
        self.cache = PagedKVCache._of_checked_sizes(
            model.config, num_blocks, block_size, weight.dtype, weight.device
        )
        self._requests = []  # every request, by id
        self._waiting = collections.deque()  # in arrival order (preempted ones first)
        self._running = []  # in admission order

    @property
    def done(self):
        """No request waits or runs."""
        return not self._waiting and not self._running

    def add_request(self, prompt, max_new_tokens):
        """Queue a greedy request: prompt (n,) token ids, up to max_new_tokens new tokens ->
        its id (an int). Chapter 19."""
        _check_prompt("prompt", prompt, self.model)
        require_int("max_new_tokens", max_new_tokens, 0)
        _check_fits("prompt", prompt, max_new_tokens, self.cache.num_blocks, self.cache.block_size)
        return self._add(prompt, max_new_tokens)

    def _add(self, prompt, max_new_tokens):
        request = _Request(len(self._requests), prompt, prompt.tolist(), max_new_tokens)
        self._requests.append(request)
        if max_new_tokens:
            self._waiting.append(request)
        return request.id

    def output(self, request):
        """Request `request`'s prompt followed by its new tokens so far -> (n + new,), as
        TinyDecoder.generate returns them. Chapter 19."""
        require_int("request", request, 0)
        if request >= len(self._requests):
            raise ValueError(f"request={request}: only {len(self._requests)} were added")
        return self._output(request)

    def _output(self, index):
        request = self._requests[index]
        new = request.tokens[len(request.prompt) :]
        if not new:
            return request.prompt.clone()
        return torch.cat([request.prompt, torch.tensor(new, device=request.prompt.device)])

    @torch.no_grad()
    def step(self):
        """One step of continuous batching, as the class docstring says -> StepRecord.
        Chapter 19."""
        # room for the running requests' next tokens, then newcomers while blocks remain
        preempted = self._make_room()
        admitted = self._admit()
        batch = list(self._running)
        tokens = sum(len(request.tokens) - request.computed for request in batch)
        finished = []
        if batch:
            # one forward pass over every request's new tokens; a greedy token each
            next_tokens = self._forward(batch).argmax(-1).tolist()
            for request, token in zip(batch, next_tokens):
                request.computed = len(request.tokens)
                request.tokens.append(token)
                # retire the finished: their blocks go back to the pool
                if len(request.tokens) - len(request.prompt) == request.max_new_tokens or (
                    token == self.stop_id
                ):
                    self.cache._release(request.sequence)
                    self._running.remove(request)
                    finished.append(request.id)
        running = [request.id for request in batch]
        return StepRecord(admitted, preempted, running, finished, tokens, self.cache.free_blocks)

    def _make_room(self):
        """Reserve each running request's next token, oldest first, preempting the newest
        while the free blocks fall short -> the preempted requests' ids."""
        preempted, index = [], 0
        while index < len(self._running):
            request = self._running[index]
            count = len(request.tokens) - request.computed
            if self.cache._blocks_needed(request.sequence, count) > self.cache.free_blocks:
                # preemption by recomputation: its blocks are freed, it waits at the front
                victim = self._running.pop()
                self.cache._release(victim.sequence)
                victim.sequence, victim.computed = None, 0
                self._waiting.appendleft(victim)
                preempted.append(victim.id)
                continue  # the same request again, unless it was the victim
            request.slots = self.cache._reserve(request.sequence, count)
            index += 1
        return preempted

    def _admit(self):
        """Admit waiting requests in order while the free blocks hold their tokens -> their
        ids."""
        admitted = []
        while self._waiting:
            request = self._waiting[0]
            sequence, shared = self._shared_start(request)
            count = len(request.tokens) - shared
            if self.cache._blocks_needed(sequence, count) > self.cache.free_blocks:
                self.cache._release(sequence)  # the fork's references go back
                break
            request.sequence, request.computed = sequence, shared
            request.slots = self.cache._reserve(sequence, count)
            self._running.append(self._waiting.popleft())
            admitted.append(request.id)
        return admitted

    def _shared_start(self, request):
        """A cache sequence for request, forked from the running request whose computed
        tokens share the longest prefix with it (at most all its tokens but the last, whose
        logits it needs) -> (sequence, shared length)."""
        source, longest = None, 0
        for other in self._running:
            limit = min(other.computed, len(request.tokens) - 1)
            common = _common_prefix(request.tokens, other.tokens, limit)
            if common > longest:
                source, longest = other, common
        if source is None:
            return self.cache.new_sequence(), 0
        return self.cache._fork(source.sequence, longest), longest

    def _forward(self, batch):
        """One pass of the model over every request's new tokens -> logits (B, vocab_size)
        at each request's last token."""
        cache, device = self.cache, self.cache.keys[0].device
        # the ragged batch: the new tokens one request after another, their positions and
        # slots; where every key is, and which keys each query may see
        ids = [token for request in batch for token in request.tokens[request.computed :]]
        positions = [p for request in batch for p in range(request.computed, len(request.tokens))]
        query_lens = torch.tensor([len(r.tokens) - r.computed for r in batch], device=device)
        key_lens = torch.tensor([len(request.tokens) for request in batch], device=device)
        tables = cache._block_tables([request.sequence for request in batch])
        key_slots, allowed = _kernels.ragged_layout(tables, query_lens, key_lens, cache.block_size)
        slots = torch.cat([request.slots for request in batch])
        positions = torch.tensor(positions, device=device)
        # the layers, as TinyDecoder's, with attention through the block tables
        x = self.model.embed(torch.tensor(ids, device=device))[None]  # (1, T, embed_dim)
        for layer, block in enumerate(self.model.blocks):
            x = self._layer(layer, block, x, positions, slots, key_slots, allowed)
        last = query_lens.cumsum(0) - 1  # each request's last token
        return self.model.lm_head(self.model.norm(x[0, last]))

    def _layer(self, layer, block, x, positions, slots, key_slots, allowed):
        """One decoder block over the ragged batch x (1, T, embed_dim) -> (1, T, embed_dim)."""
        attention = block.attention
        h = block.attention_norm(x)
        # project: q (1, H, T, d_h); k, v (1, H_kv, T, d_h); RoPE at each token's position
        q = _kernels.split_heads(attention.q_proj(h), attention.num_heads)
        k = _kernels.split_heads(attention.k_proj(h), attention.num_kv_heads)
        v = _kernels.split_heads(attention.v_proj(h), attention.num_kv_heads)
        rotated = block._rotated(torch.cat([q, k], dim=1), positions)
        q, k = rotated.split([q.shape[1], k.shape[1]], dim=1)
        # store the new keys and values (T, H_kv, d_h) in their slots, then attend through
        # the block tables
        self.cache._write(layer, slots, k[0].transpose(0, 1), v[0].transpose(0, 1))
        keys, values = self.cache.keys[layer], self.cache.values[layer]
        heads = _kernels.gathered_attention(q, keys, values, key_slots, allowed)
        return block._feed_forward(x + attention.out_proj(_kernels.merge_heads(heads)))


def _check_counts(max_new_tokens, count):
    """An integer >= 0, or a list of them, one per prompt -> the list."""
    if is_integer(max_new_tokens):
        require_int("max_new_tokens", max_new_tokens, 0)
        return [max_new_tokens] * count
    if not isinstance(max_new_tokens, (list, tuple)):
        raise TypeError(
            "max_new_tokens must be an integer or a list of integers, one per prompt, got "
            f"{max_new_tokens!r} ({type_name(max_new_tokens)})"
        )
    if len(max_new_tokens) != count:
        raise ValueError(f"max_new_tokens holds {len(max_new_tokens)} counts for {count} prompts")
    for index, value in enumerate(max_new_tokens):
        require_int(f"max_new_tokens[{index}]", value, 0)
    return list(max_new_tokens)


def generate_continuous(
    model, prompts, max_new_tokens, block_size=16, stop_id=None, *, num_blocks=None
):
    """Greedy decoding of many prompts by continuous batching over a paged KV cache -> a
    list with one 1-D id tensor per prompt, the prompt followed by its new tokens.

    prompts: a list of 1-D token id tensors (any lengths); max_new_tokens: one count, or a
    list of one per prompt; stop_id: a request stops once it has produced it (kept);
    num_blocks: the memory budget, blocks of block_size tokens per layer (None: room for
    every request at once), at least what the longest request needs alone: requests wait
    for blocks, and the newest is preempted when they run out (ContinuousBatcher). Each
    request's tokens equal model.generate(prompt[None], max_new_tokens, stop_id=stop_id)[0].
    A model with a sliding window, sinks or "dynamic" RoPE scaling raises ValueError (the
    pool keeps every token at its own position). Chapter 19."""
    _check_model(model)
    if not isinstance(prompts, (list, tuple)):
        raise TypeError(f"prompts must be a list of 1-D token id tensors, got {type_name(prompts)}")
    for index, prompt in enumerate(prompts):
        _check_prompt(f"prompts[{index}]", prompt, model)
    counts = _check_counts(max_new_tokens, len(prompts))
    require_int("block_size", block_size, 1)
    _check_stop(stop_id, model)
    if num_blocks is None:
        footprints = [_footprint(p, n, block_size) for p, n in zip(prompts, counts)]
        num_blocks = max(1, sum(footprints))
    else:
        require_int("num_blocks", num_blocks, 1)
        for index, (prompt, count) in enumerate(zip(prompts, counts)):
            _check_fits(f"prompts[{index}]", prompt, count, num_blocks, block_size)
    # every request queued at once; steps until all are done
    batcher = ContinuousBatcher._of_checked(model, num_blocks, block_size, stop_id)
    requests = [batcher._add(prompt, count) for prompt, count in zip(prompts, counts)]
    while not batcher.done:
        batcher.step()
    return [batcher._output(request) for request in requests]
