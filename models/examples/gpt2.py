#!/usr/bin/env python3
"""Hugging Face's GPT2LMHeadModel (transformers), tiny and with random weights, as the layers of a
pipeline: a gpipe-model/1 file names it as "python": "gpt2.py:build" (see gpt2.json) and the
executor exports it to TorchScript (executor/export_model.py) before it runs.

How to cut your own model into layers: build() returns an nn.Sequential whose children are called in
order, each with the previous one's outputs as positional tensors (the first with the int64 tokens,
(batch, seq_len)), each returning a tensor or a tuple of tensors. Hugging Face's forward() does more
than call its blocks (position ids, masks, caches, a ModelOutput), so each piece gets a wrapper of a
few lines that does its part of that forward and returns plain tensors. A wrapper holds the model's
own modules (not copies): the parameters stay the model's, and a parameter that two layers hold
(GPT-2's lm_head.weight IS wte.weight) is exported as a tie that the executor keeps tied.

Dropout is 0 so that a pipelined run gives the losses of one process exactly. Attention is "sdpa",
which is causal when no attention mask is given (the block gets none here).
"""
import torch
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel


class Embedding(nn.Module):
    """Tokens (batch, seq) -> hidden states (batch, seq, dim): GPT2Model.forward's first lines."""

    def __init__(self, transformer):
        super().__init__()
        self.wte, self.wpe, self.drop = transformer.wte, transformer.wpe, transformer.drop

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1], device=tokens.device).unsqueeze(0)
        return self.drop(self.wte(tokens) + self.wpe(positions))


class Block(nn.Module):
    """One GPT2Block; returns the hidden states only (no cache, no attention weights)."""

    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, hidden):
        out = self.block(hidden)
        return out[0] if isinstance(out, tuple) else out


class Head(nn.Module):
    """Final layer norm and the LM head -> logits (batch, seq, vocab)."""

    def __init__(self, model):
        super().__init__()
        self.ln_f, self.lm_head = model.transformer.ln_f, model.lm_head

    def forward(self, hidden):
        return self.lm_head(self.ln_f(hidden))


def config(n_layer=4, n_embd=128, n_head=4, vocab_size=96, n_positions=64):
    return GPT2Config(n_layer=n_layer, n_embd=n_embd, n_head=n_head, vocab_size=vocab_size,
                      n_positions=n_positions, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                      attn_implementation="sdpa")


def build(**kwargs) -> nn.Sequential:
    model = GPT2LMHeadModel(config(**kwargs))
    assert model.lm_head.weight is model.transformer.wte.weight  # tied, as GPT-2 has it
    return nn.Sequential(Embedding(model.transformer), *[Block(b) for b in model.transformer.h], Head(model))


def build_bytes() -> nn.Sequential:
    """The same GPT-2 over a byte-level vocabulary (256 ids), for token files that
    scripts/prepare_tokens.py writes (gpt2-tokens.json)."""
    return build(vocab_size=256)


if __name__ == "__main__":
    print(build())
