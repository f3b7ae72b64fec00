"""A tiny random-weight llama model as GGUF, written with the ``gguf`` package; nothing is
downloaded. Vocabulary: <unk>, <s>, </s>, the 256 byte tokens <0x00>..<0xFF> (type 6), and a few
ordinary pieces, so any text tokenizes and any output detokenizes."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

PIECES = [
    f"▁{w}" for w in ("the", "node", "is", "in", "its", "boring", "zone", "and", "tokens", "flow")
]
PIECES += [*"abcdefghijklmnopqrstuvwxyz", "▁"]


def write_tiny_llama(path: Path, n_embd: int = 64, n_layer: int = 2, n_head: int = 4, n_ff: int = 128,
                     ctx: int = 4096, seed: int = 0) -> Path:  # fmt: skip
    rng = np.random.default_rng(seed)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + PIECES
    types = [2, 3, 3] + [6] * 256 + [1] * len(PIECES)  # unknown, control, byte, normal
    scores = [0.0, 0.0, 0.0] + [-1000.0] * 256 + [-float(i) for i in range(len(PIECES))]
    n_vocab = len(tokens)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("gpuwatch-tiny")
    w.add_context_length(ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)

    def t(name: str, *shape: int, scale: float = 0.02) -> None:
        w.add_tensor(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    t("token_embd.weight", n_vocab, n_embd)
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    t("output.weight", n_vocab, n_embd)
    for i in range(n_layer):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            t(f"blk.{i}.{name}.weight", n_embd, n_embd)
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        t(f"blk.{i}.ffn_gate.weight", n_ff, n_embd)
        t(f"blk.{i}.ffn_up.weight", n_ff, n_embd)
        t(f"blk.{i}.ffn_down.weight", n_embd, n_ff)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
