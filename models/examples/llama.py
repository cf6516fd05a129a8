#!/usr/bin/env python3
"""Hugging Face's LlamaForCausalLM (transformers), tiny and with random weights, as the layers of a
pipeline whose boundaries are TUPLES of tensors: a gpipe-model/1 file names it as
"python": "llama.py:build" (see llama.json) and the executor exports it to TorchScript
(executor/export_model.py) before it runs.

A layer may return a tuple; the next layer is called with its elements as positional arguments.
Here the embedding layer computes what every decoder layer needs once (the rotary cos and sin, and
the position ids, int64 — a tensor that is not float moves between stages as it is, without a
gradient) and each decoder layer passes them on:

  Embedding:    tokens                           -> (hidden, cos, sin, position_ids)
  DecoderLayer: (hidden, cos, sin, position_ids) -> (hidden, cos, sin, position_ids)
  Head:         (hidden, cos, sin, position_ids) -> logits

Every tensor at a boundary has the batch first (position_ids is expanded to (batch, seq)).
Attention is "sdpa", which is causal when no attention mask is given (the layers get none).
"""
import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM


class Embedding(nn.Module):
    """Tokens -> (hidden, cos, sin, position_ids): LlamaModel.forward's first lines."""

    def __init__(self, model):
        super().__init__()
        self.embed_tokens, self.rotary_emb = model.model.embed_tokens, model.model.rotary_emb

    def forward(self, tokens):
        batch, seq = tokens.shape
        position_ids = torch.arange(seq, device=tokens.device).unsqueeze(0).expand(batch, seq).contiguous()
        hidden = self.embed_tokens(tokens)
        cos, sin = self.rotary_emb(hidden, position_ids)
        return hidden, cos, sin, position_ids


class DecoderLayer(nn.Module):
    """One LlamaDecoderLayer; passes cos, sin and the position ids on to the next layer."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, hidden, cos, sin, position_ids):
        out = self.layer(hidden, position_embeddings=(cos, sin), position_ids=position_ids)
        return (out[0] if isinstance(out, tuple) else out), cos, sin, position_ids


class Head(nn.Module):
    """Final RMS norm and the LM head -> logits (batch, seq, vocab)."""

    def __init__(self, model):
        super().__init__()
        self.norm, self.lm_head = model.model.norm, model.lm_head

    def forward(self, hidden, cos, sin, position_ids):
        return self.lm_head(self.norm(hidden))


def config(num_hidden_layers=2, hidden_size=64, vocab_size=96, max_position_embeddings=64):
    return LlamaConfig(hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                       num_hidden_layers=num_hidden_layers, num_attention_heads=4, num_key_value_heads=2,
                       vocab_size=vocab_size, max_position_embeddings=max_position_embeddings,
                       attention_dropout=0.0, tie_word_embeddings=False, attn_implementation="sdpa")


def build(**kwargs) -> nn.Sequential:
    model = LlamaForCausalLM(config(**kwargs))
    return nn.Sequential(Embedding(model), *[DecoderLayer(l) for l in model.model.layers], Head(model))


if __name__ == "__main__":
    print(build())
