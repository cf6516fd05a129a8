#!/usr/bin/env python3
"""Regenerate the shipped analytic profiles and cluster files of gpipe-plan.

Usage (from the repository root; Python 3.11, standard library only):

    python3 profiles/generate.py           # (re)writes profiles/*.json and profiles/clusters/*.json
    python3 profiles/generate.py --check   # writes nothing; exit 1 if a shipped file differs

Every number is computed here from the model shapes and the device datasheets; nothing is measured
and nothing is random, so the output is identical on every run. profiles/README.md explains the
formulas and cites where each constant comes from.

Cost model (one micro-batch, one layer):
  * A layer is a list of ops. Each op has a forward part, an input-gradient part (B) and a
    weight-gradient part (W), each given as (FLOPs, bytes moved through device memory).
  * Time of one part = max(FLOPs / (peak * MATMUL_EFF), bytes / (bandwidth * BANDWIDTH_EFF)),
    a per-op roofline; a layer's time is the sum over its ops (kernels run one after another).
  * GEMM/conv: forward 2*M*K*N FLOPs; B and W are each another 2*M*K*N (backward = 2x forward).
    A GEMM whose operands are both activations (attention scores) has no W; both of its operand
    gradients are B. Elementwise work (norms, softmax, GELU, dropout, residual adds, gathers)
    only moves bytes.
  * forward_ms = sum of forward parts; backward_ms = sum of B and W parts;
    backward_weight_ms = sum of W parts.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

GENERATOR_COMMAND = "python3 profiles/generate.py"
PROFILE_FORMAT = "gpipe-profile/1"
CLUSTER_FORMAT = "gpipe-cluster/1"

# Assumed achieved fraction of the datasheet peaks on the GPUs.
MATMUL_EFF = 0.50      # of dense bf16 tensor-core peak, for GEMMs and convolutions
BANDWIDTH_EFF = 0.70   # of HBM bandwidth, for every op's memory traffic

MASK_BYTES = 1         # dropout masks are stored as one byte (bool) per element
INDEX_BYTES = 8        # token ids, labels and max-pool indices are int64
LOSS_DTYPE_BYTES = 4   # logits are cast to fp32 for softmax + cross-entropy (saved for backward)
SIG_DIGITS = 6


# --------------------------------------------------------------------------------------------
# Devices
# --------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Device:
    key: str              # file-name part
    name: str             # "device" field in profiles
    peak_flops: float     # dense, per second, in the profile's dtype
    bandwidth: float      # device memory bandwidth, bytes per second
    memory_bytes: int     # datasheet capacity, decimal bytes
    matmul_eff: float
    bandwidth_eff: float
    citation: str


DEVICES = [
    Device("a100-80gb", "A100-80GB", 312e12, 2.039e12, 80 * 10**9, MATMUL_EFF, BANDWIDTH_EFF,
           "NVIDIA A100 80GB SXM datasheet: 312 TFLOPS dense BF16 tensor core, 2.039 TB/s HBM2e, "
           "80 GB"),
    Device("h100-80gb", "H100-80GB", 989e12, 3.35e12, 80 * 10**9, MATMUL_EFF, BANDWIDTH_EFF,
           "NVIDIA H100 SXM5 80GB datasheet: 989 TFLOPS dense BF16 tensor core (1979 with "
           "sparsity), 3.35 TB/s HBM3, 80 GB"),
    Device("h200-141gb", "H200-141GB", 989e12, 4.8e12, 141 * 10**9, MATMUL_EFF, BANDWIDTH_EFF,
           "NVIDIA H200 SXM 141GB datasheet: 989 TFLOPS dense BF16 tensor core, 4.8 TB/s HBM3e, "
           "141 GB"),
]

# The tiny CPU profile: rates are assumed *achieved* rates of one PyTorch CPU thread.
CPU_1_THREAD = Device("cpu", "cpu-1-thread", 20e9, 10e9, 8 * 2**30, 1.0, 1.0,
                      "assumed achieved rates of one CPU thread: 20 GFLOP/s fp32 GEMM, "
                      "10 GB/s for elementwise memory traffic")


# --------------------------------------------------------------------------------------------
# Ops and layers
# --------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Op:
    what: str
    fwd: tuple[float, float] = (0.0, 0.0)   # (FLOPs, bytes)
    bin: tuple[float, float] = (0.0, 0.0)   # input-gradient part (B)
    bwt: tuple[float, float] = (0.0, 0.0)   # weight-gradient part (W)


@dataclasses.dataclass
class Layer:
    """`saved_bytes`: what the layer's backward needs kept, counted as in the literature (its own
    input included when the backward reads it); `input_saved_bytes`: the part of it that is the
    layer's input. The profile's `activation_bytes` is what the forward adds and keeps, as the
    profiler measures it: saved - input_saved + output (the output stays alive: the next layer's
    backward or the stage that sends it holds it). The input is the previous layer's output, or
    the stage's input, which the simulator's stash counts once."""
    name: str
    ops: list[Op]
    params: int
    saved_bytes: int
    output_bytes: int
    input_saved_bytes: int = 0
    # Under tensor parallelism: bytes whose ring all-reduce over the t devices costs what the
    # layer's collectives cost in its forward / its backward (an all-gather or a reduce-scatter
    # of an n-byte tensor counts n/2, an all-reduce n).
    forward_collective_bytes: float = 0.0
    backward_collective_bytes: float = 0.0

    @property
    def activation_bytes(self) -> int:
        return self.saved_bytes - self.input_saved_bytes + self.output_bytes


def gemm(what, m, k, n, dt, count=1, weight=True, dgrad=True):
    """(m x k) @ (k x n), `count` times (batched). With weight=True the (k x n) operand is a
    parameter shared by the batch; otherwise both operands are activations."""
    flops = 2.0 * m * k * n * count
    a = m * k * dt * count
    w = k * n * dt * (1 if weight else count)
    out = m * n * dt * count
    fwd = (flops, a + w + out)
    if weight:
        bin_ = (flops, out + w + a) if dgrad else (0.0, 0.0)   # read dY, W; write dX
        bwt = (flops, a + out + w)                              # read X, dY; write dW
    else:
        bin_ = (2.0 * flops, 2.0 * (a + w + out))               # dA and dB, both activations
        bwt = (0.0, 0.0)
    return Op(what, fwd, bin_, bwt)


def elementwise(what, fwd_bytes, bwd_bytes, bwd_weight_bytes=0.0):
    return Op(what, (0.0, fwd_bytes), (0.0, bwd_bytes), (0.0, bwd_weight_bytes))


def op_ms(part, dev: Device) -> float:
    flops, nbytes = part
    compute = flops / (dev.peak_flops * dev.matmul_eff)
    memory = nbytes / (dev.bandwidth * dev.bandwidth_eff)
    return 1e3 * max(compute, memory)


def layer_times(layer: Layer, dev: Device):
    fwd = sum(op_ms(o.fwd, dev) for o in layer.ops)
    b = sum(op_ms(o.bin, dev) for o in layer.ops)
    w = sum(op_ms(o.bwt, dev) for o in layer.ops)
    return fwd, b + w, w


def matmul_flops(layer: Layer):
    """Forward, B and W FLOPs of a layer (only GEMMs/convs have FLOPs in this model)."""
    return (sum(o.fwd[0] for o in layer.ops), sum(o.bin[0] for o in layer.ops),
            sum(o.bwt[0] for o in layer.ops))


# --------------------------------------------------------------------------------------------
# Transformer layers
# --------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class TransformerSpec:
    key: str
    title: str
    layers: int        # transformer blocks
    hidden: int        # h
    heads: int         # a
    seq: int           # s
    vocab: int         # V
    ffn: int           # feed-forward width (4h for every shipped model)
    positions: int     # rows of the learned position table (0: sinusoidal, no parameters)
    style: str         # "gpt" (pre-LN, LN + LM head) or "bert" (post-LN, MLM + NSP heads)
    tied_in_original: bool
    microbatch: int
    dtype: str
    reference_params: float   # published parameter count (tied if tied_in_original)
    description: str


def transformer_block_activation_bytes(s, b, h, a, f, dt):
    """Bytes saved for backward by one block, no recomputation (Korthikanti et al. 2022, sec. 4.1,
    generalised to any dtype size dt and FFN width f; dropout masks are 1 byte).
      attention: QKV input, Q, K, softmax output, its dropout mask and output, V, projection
                 input, projection dropout mask  -> 5 s b h + 2 a s^2 b elements, a s^2 b + s b h
                 mask bytes
      MLP:       fc1 input, GELU input (f), fc2 input (f), dropout mask -> s b h + 2 s b f elements,
                 s b h mask bytes
      2 layer norms: their inputs -> 2 s b h elements
    With dt = 2 and f = 4h this is s*b*h*(34 + 5*a*s/h)."""
    t = s * b
    elems = 8 * t * h + 2 * t * f + 2 * a * s * s * b
    masks = 2 * t * h + a * s * s * b
    return elems * dt + masks * MASK_BYTES


def transformer_block(name, s, b, h, a, f, dt, tp=1):
    """One block; with tp > 1 one device's share under Megatron-LM tensor parallelism with sequence
    parallelism (Korthikanti et al. 2022): QKV and fc1 column-parallel, projection and fc2
    row-parallel, a/tp heads per device, layer norms, dropout and residuals on s/tp of the
    sequence. Activations (sec. 4.2.2: s*b*h*(34/t + 5*a*s/(h*t))), the output sent onward and the
    split weights divide by tp; biases of the row-parallel GEMMs and the layer norms are replicated.
    Collectives: an all-gather before QKV and fc1 and a reduce-scatter after the projection and
    fc2, of an s*b*h tensor each, in the forward; their reverse in the backward."""
    t = s * b
    ts = t // tp                 # tokens of the sequence-parallel regions
    d = h // a
    att = a * s * s * b // tp    # elements of one device's attention-score tensor
    # dropout + residual add; backward also sums the skip-path gradient (read 2, write 1)
    residual = elementwise("dropout+residual", ts * h * (3 * dt + MASK_BYTES),
                           ts * h * (5 * dt + MASK_BYTES))
    ops = [
        elementwise("layernorm1", 2 * ts * h * dt, 3 * ts * h * dt),
        gemm("qkv", t, h, 3 * h // tp, dt),
        gemm("scores QK^T", s, d, s, dt, count=b * a // tp, weight=False),
        elementwise("scale+mask+softmax", 2 * att * dt, 3 * att * dt),
        elementwise("attention dropout", att * (2 * dt + MASK_BYTES), att * (2 * dt + MASK_BYTES)),
        gemm("scores @ V", s, s, d, dt, count=b * a // tp, weight=False),
        gemm("projection", t, h // tp, h, dt),
        residual,
        elementwise("layernorm2", 2 * ts * h * dt, 3 * ts * h * dt),
        gemm("fc1", t, h, f // tp, dt),
        elementwise("gelu", 2 * t * f // tp * dt, 3 * t * f // tp * dt),
        gemm("fc2", t, f // tp, h, dt),
        residual,
    ]
    params = ((h * 3 * h + 3 * h) // tp + (h * h) // tp + h + (h * f + f) // tp + (f * h) // tp + h
              + 2 * (2 * h))
    collectives = 0.0 if tp == 1 else 4 * (t * h * dt) / 2
    # Korthikanti's count includes the first layer norm's input: the block's input.
    return Layer(name, ops, params, transformer_block_activation_bytes(s, b, h, a, f, dt) // tp,
                 ts * h * dt, input_saved_bytes=ts * h * dt,
                 forward_collective_bytes=collectives, backward_collective_bytes=collectives)


def dense_embedding_grad_bytes(rows, h, t, dt):
    """Dense gradient of an embedding table: zero-fill the rows x h gradient (1 pass), scatter-add
    t token gradients into it (read dY, ids, read-modify-write rows), accumulate into the
    parameter's gradient buffer (read it, read + write the buffer: 3 passes)."""
    return 4 * rows * h * dt + 3 * t * h * dt + t * INDEX_BYTES


def gpt_embedding(spec: TransformerSpec, b, dt, tp=1):
    """With tp > 1 vocabulary-parallel (V/tp rows per device, every token looked up, rows outside
    masked) and reduce-scattered onto s/tp of the sequence, where positions and dropout apply
    (the position table is replicated, as in Megatron-LM)."""
    h, v, t = spec.hidden, spec.vocab, spec.seq * b
    ts = t // tp
    fwd = (t * INDEX_BYTES + 2 * t * h * dt          # gather token rows
           + 3 * ts * h * dt                         # add position rows (read 2, write 1)
           + ts * h * (2 * dt + MASK_BYTES))         # dropout
    bin_ = ts * h * (2 * dt + MASK_BYTES)            # dropout backward
    bwt = dense_embedding_grad_bytes(v // tp, h, t, dt)
    if spec.positions:
        bwt += ts * h * dt + spec.positions * h * dt  # position gradient: sum over the micro-batch
    ops = [elementwise("token+position embedding, dropout", fwd, bin_, bwt)]
    params = v * h // tp + spec.positions * h
    activation = t * INDEX_BYTES + ts * h * MASK_BYTES  # ids (for the scatter) + dropout mask
    collective = 0.0 if tp == 1 else t * h * dt / 2    # reduce-scatter; all-gather of its gradient
    return Layer("embedding", ops, params, activation, ts * h * dt, input_saved_bytes=t * INDEX_BYTES,
                 forward_collective_bytes=collective, backward_collective_bytes=collective)


def bert_embedding(spec: TransformerSpec, b, dt, tp=1):
    """With tp > 1 the word table is vocabulary-parallel and reduce-scattered onto s/tp of the
    sequence; positions, token types, the layer norm and dropout apply there (replicated tables)."""
    h, v, t = spec.hidden, spec.vocab, spec.seq * b
    ts = t // tp
    types = 2
    fwd = (2 * t * INDEX_BYTES + 2 * t * h * dt      # gather word rows (every token)
           + 2 * 2 * ts * h * dt                     # gather position and token-type rows
           + 2 * 3 * ts * h * dt                     # two adds
           + 2 * ts * h * dt                         # layer norm
           + ts * h * (2 * dt + MASK_BYTES))         # dropout
    bin_ = ts * h * (2 * dt + MASK_BYTES) + 3 * ts * h * dt   # dropout + layer-norm backward
    bwt = (dense_embedding_grad_bytes(v // tp, h, t, dt)
           + ts * h * dt + spec.positions * h * dt
           + ts * h * dt + types * h * dt)
    ops = [elementwise("word+position+type embedding, layernorm, dropout", fwd, bin_, bwt)]
    params = v * h // tp + spec.positions * h + types * h + 2 * h
    # word ids + type ids, layer-norm input, dropout mask
    activation = 2 * t * INDEX_BYTES + ts * h * dt + ts * h * MASK_BYTES
    collective = 0.0 if tp == 1 else t * h * dt / 2
    return Layer("embedding", ops, params, activation, ts * h * dt, input_saved_bytes=2 * t * INDEX_BYTES,
                 forward_collective_bytes=collective, backward_collective_bytes=collective)


def cross_entropy(t, v, dt):
    """fp32 softmax cross-entropy over bf16 logits: read logits, write fp32 log-probs, read them
    again for the loss; backward reads the fp32 probabilities and writes the bf16 logit grad.
    (`v`: the vocabulary columns of one device.)"""
    return elementwise("softmax cross-entropy (fp32)",
                       t * v * (dt + 2 * LOSS_DTYPE_BYTES) + t * INDEX_BYTES,
                       t * v * (LOSS_DTYPE_BYTES + dt) + t * INDEX_BYTES)


def parallel_head_collectives(t, h, dt, tp):
    """Vocabulary-parallel head: the all-gather of its s/tp-sharded input (and the reduce-scatter of
    that input's gradient), and the loss's three all-reduces of one fp32 value per token (the
    logits' max, the sum of exponentials, the target's logit)."""
    if tp == 1:
        return 0.0, 0.0
    return t * h * dt / 2 + 3 * t * LOSS_DTYPE_BYTES, t * h * dt / 2


def gpt_head(spec: TransformerSpec, b, dt, tp=1):
    """With tp > 1 the final layer norm on s/tp of the sequence, the LM head column-parallel over
    the vocabulary and Megatron-LM's vocabulary-parallel cross-entropy."""
    h, v, t = spec.hidden, spec.vocab, spec.seq * b
    ts = t // tp
    ops = [
        elementwise("final layernorm", 2 * ts * h * dt, 3 * ts * h * dt),
        gemm("lm head", t, h, v // tp, dt),
        cross_entropy(t, v // tp, dt),
    ]
    params = 2 * h + h * v // tp              # final LN + untied LM head (no bias)
    # LN input, LM-head input, fp32 logits/softmax kept by the loss (Korthikanti et al. 4sbv)
    activation = 2 * ts * h * dt + t * (v // tp) * max(dt, LOSS_DTYPE_BYTES)
    fwd_c, bwd_c = parallel_head_collectives(t, h, dt, tp)
    return Layer("head", ops, params, activation, LOSS_DTYPE_BYTES, input_saved_bytes=ts * h * dt,
                 forward_collective_bytes=fwd_c, backward_collective_bytes=bwd_c)


def bert_head(spec: TransformerSpec, b, dt, tp=1):
    """With tp > 1 the pooler, NSP classifier and MLM transform replicated (the MLM transform on
    s/tp of the sequence), the decoder column-parallel over the vocabulary, the loss
    vocabulary-parallel."""
    h, v, t = spec.hidden, spec.vocab, spec.seq * b
    ts = t // tp
    ops = [
        gemm("pooler dense ([CLS])", b, h, h, dt),
        elementwise("pooler tanh", 2 * b * h * dt, 3 * b * h * dt),
        gemm("nsp classifier", b, h, 2, dt),
        gemm("mlm transform dense", ts, h, h, dt),
        elementwise("mlm gelu", 2 * ts * h * dt, 3 * ts * h * dt),
        elementwise("mlm layernorm", 2 * ts * h * dt, 3 * ts * h * dt),
        gemm("mlm decoder", t, h, v // tp, dt),
        cross_entropy(t, v // tp, dt),
    ]
    params = ((h * h + h) + (h * 2 + 2)                 # pooler, NSP classifier
              + (h * h + h) + 2 * h + (h * v + v) // tp)  # MLM transform, LN, untied decoder + bias
    activation = (2 * b * h * dt                        # pooler input, tanh output
                  + 4 * ts * h * dt                     # dense in, GELU in, LN in, decoder in
                  + t * (v // tp) * max(dt, LOSS_DTYPE_BYTES))  # fp32 logits/softmax
    fwd_c, bwd_c = parallel_head_collectives(t, h, dt, tp)
    # the MLM dense input is the head's input
    return Layer("head", ops, params, activation, LOSS_DTYPE_BYTES, input_saved_bytes=ts * h * dt,
                 forward_collective_bytes=fwd_c, backward_collective_bytes=bwd_c)


def transformer_layers(spec: TransformerSpec, dt, tp=1):
    b = spec.microbatch
    s, h, a, f = spec.seq, spec.hidden, spec.heads, spec.ffn
    if spec.style == "bert":
        first, last = bert_embedding(spec, b, dt, tp), bert_head(spec, b, dt, tp)
    else:
        first, last = gpt_embedding(spec, b, dt, tp), gpt_head(spec, b, dt, tp)
    width = len(str(spec.layers - 1))
    blocks = [transformer_block(f"block{i:0{width}d}", s, b, h, a, f, dt, tp)
              for i in range(spec.layers)]
    return [first] + blocks + [last]


# Tensor-parallel sizes written for the transformers: the divisors of an 8-GPU node above 1 that
# divide the heads, the FFN width, the vocabulary rows used and the sequence (sequence parallelism).
TENSOR_PARALLEL_SIZES = (2, 4, 8)


def tensor_parallel_sizes(spec: TransformerSpec):
    return [tp for tp in TENSOR_PARALLEL_SIZES
            if spec.heads % tp == 0 and spec.ffn % tp == 0 and spec.hidden % tp == 0
            and (spec.seq * spec.microbatch) % tp == 0]


def transformer_input_bytes(spec: TransformerSpec):
    t = spec.seq * spec.microbatch
    return t * INDEX_BYTES * (2 if spec.style == "bert" else 1)


TRANSFORMERS = [
    TransformerSpec(
        "bert-large", "BERT-Large", 24, 1024, 16, 512, 30522, 4096, 512, "bert", True, 1, "bf16",
        335e6,
        "BERT-Large (Devlin et al. 2019): 24 post-LN blocks, h=1024, a=16, s=512, V=30522 "
        "(WordPiece), learned positions (512) and 2 token types; head = pooler + NSP + MLM "
        "transform + decoder over all s positions (as in Hugging Face BertForPreTraining); the "
        "decoder is tied to the word embedding in the original, here it is an untied copy"),
    TransformerSpec(
        "gpt2-1.5b", "GPT-2 1.5B", 48, 1600, 25, 1024, 50257, 6400, 1024, "gpt", True, 1, "bf16",
        1.558e9,
        "GPT-2 XL 1.5B (Radford et al. 2019): 48 pre-LN blocks, h=1600, a=25, s=1024, V=50257, "
        "learned positions (1024); head = final LN + LM head (no bias) + loss; the LM head is tied "
        "to the token embedding in the original, here it is an untied copy"),
    TransformerSpec(
        "gpt3-13b", "GPT-3 13B", 40, 5120, 40, 2048, 50257, 20480, 2048, "gpt", True, 1, "bf16",
        12.85e9,
        "GPT-3 13B (Brown et al. 2020, Table 2.1): 40 blocks, h=5120, a=40, s=2048, V=50257 "
        "(GPT-2 BPE), learned positions (2048), dense attention in every layer (the paper's "
        "alternating sparse layers are ignored); head = final LN + LM head (no bias) + loss; "
        "untied LM head"),
    TransformerSpec(
        "gpt3-175b", "GPT-3 175B", 96, 12288, 96, 2048, 50257, 49152, 2048, "gpt", True, 1, "bf16",
        175e9,
        "GPT-3 175B (Brown et al. 2020, Table 2.1): 96 blocks, h=12288, a=96, s=2048, V=50257, "
        "learned positions (2048), dense attention in every layer; head = final LN + LM head "
        "(no bias) + loss; untied LM head"),
    TransformerSpec(
        "gpipe-transformer-103", "GPipe Transformer-103", 103, 2048, 32, 1024, 32000, 8192, 0,
        "gpt", False, 1, "bf16", 5.3e9,
        "GPipe Transformer-L with L=103 (Huang et al. 2019, Table 1, the 8-accelerator "
        "'Pipeline-8' row, 5.3B parameters): model dim 2048, FFN 8192, 32 heads, vocabulary 32k, "
        "sequence length 1024; modelled as a pre-LN decoder-only stack with sinusoidal positions "
        "(no position parameters) and separate input embedding and softmax weights (this layout "
        "reproduces the paper's counts 282.2M/785.8M/5.3B/21.0B/83.9B for L=3/13/103/415/1663)"),
]


# --------------------------------------------------------------------------------------------
# ResNet-152 (torchvision layout, v1.5: stride on the 3x3 conv)
# --------------------------------------------------------------------------------------------

RESNET_BLOCKS = [3, 8, 36, 3]     # conv2_x .. conv5_x
RESNET_PLANES = [64, 128, 256, 512]
RESNET_MICROBATCH = 8
RESNET_IMAGE = 224
RESNET_CLASSES = 1000


def conv(what, b, cin, cout, k, stride, hin, dt, dgrad=True):
    hout = hin // stride
    flops = 2.0 * b * hout * hout * cout * cin * k * k
    x = b * cin * hin * hin * dt
    w = cin * cout * k * k * dt
    y = b * cout * hout * hout * dt
    fwd = (flops, x + w + y)
    bin_ = (flops, y + w + x) if dgrad else (0.0, 0.0)
    bwt = (flops, x + y + w)
    return Op(what, fwd, bin_, bwt), cin * cout * k * k, hout


def batchnorm(what, elems, dt):
    # forward: statistics pass + normalise pass (read 2, write 1); backward: two reductions over
    # (dY, X) then the input gradient (read 4, write 1); gamma/beta grads are fused into it (B).
    return elementwise(what, 3 * elems * dt, 5 * elems * dt)


def relu(what, elems, dt):
    return elementwise(what, 2 * elems * dt, 3 * elems * dt)


def resnet_stem(b, dt):
    img = RESNET_IMAGE
    op, conv_params, h1 = conv("conv1 7x7/2", b, 3, 64, 7, 2, img, dt, dgrad=False)
    e1 = b * 64 * h1 * h1
    hp = h1 // 2
    ep = b * 64 * hp * hp
    ops = [
        op,
        batchnorm("bn1", e1, dt),
        relu("relu", e1, dt),
        # max-pool 3x3/2 with int64 indices; backward zero-fills dX and scatters dY into it
        elementwise("maxpool 3x3/2", e1 * dt + ep * (dt + INDEX_BYTES),
                    e1 * dt + ep * (dt + INDEX_BYTES)),
    ]
    params = conv_params + 2 * 64
    activation = (b * 3 * img * img * dt      # image (conv1 weight gradient)
                  + e1 * dt                   # bn1 input
                  + e1 * dt                   # relu output (relu and max-pool backward)
                  + ep * INDEX_BYTES)         # max-pool indices
    return Layer("stem", ops, params, activation, ep * dt, input_saved_bytes=b * 3 * img * img * dt), hp


def resnet_bottleneck(name, b, cin, planes, stride, hin, dt):
    out_c = 4 * planes
    ops = []
    params = 0
    o, p, _ = conv("conv 1x1", b, cin, planes, 1, 1, hin, dt)
    e1 = b * planes * hin * hin
    ops += [o, batchnorm("bn", e1, dt), relu("relu", e1, dt)]
    params += p + 2 * planes
    o, p, hout = conv(f"conv 3x3/{stride}", b, planes, planes, 3, stride, hin, dt)
    e2 = b * planes * hout * hout
    ops += [o, batchnorm("bn", e2, dt), relu("relu", e2, dt)]
    params += p + 2 * planes
    o, p, _ = conv("conv 1x1", b, planes, out_c, 1, 1, hout, dt)
    e3 = b * out_c * hout * hout
    ops += [o, batchnorm("bn", e3, dt)]
    params += p + 2 * out_c
    saved = b * cin * hin * hin + e1 + e1 + e2 + e2 + e3   # x, bn1 in, relu1 out, ... bn3 in
    if stride != 1 or cin != out_c:
        o, p, _ = conv(f"downsample 1x1/{stride}", b, cin, out_c, 1, stride, hin, dt)
        ops += [o, batchnorm("downsample bn", e3, dt)]
        params += p + 2 * out_c
        saved += e3
    # residual add (read 2, write 1; its backward only forwards dY) + in-place relu
    ops += [elementwise("add", 3 * e3 * dt, 0.0), relu("relu", e3, dt)]
    # x is the block's input; the final relu output (kept by the relu backward) is its output.
    return Layer(name, ops, params, saved * dt, e3 * dt, input_saved_bytes=b * cin * hin * hin * dt), hout


def resnet_head(b, dt, hin):
    c = 4 * RESNET_PLANES[-1]
    e = b * c * hin * hin
    ops = [
        elementwise("global average pool", e * dt + b * c * dt, b * c * dt + e * dt),
        gemm("fc", b, c, RESNET_CLASSES, dt),
        cross_entropy(b, RESNET_CLASSES, dt),
    ]
    params = c * RESNET_CLASSES + RESNET_CLASSES
    activation = (e * dt                                   # last relu output (relu backward)
                  + b * c * dt                             # fc input
                  + b * RESNET_CLASSES * LOSS_DTYPE_BYTES)  # fp32 softmax
    return Layer("head", ops, params, activation, LOSS_DTYPE_BYTES, input_saved_bytes=e * dt)


def resnet152_layers(dt):
    b = RESNET_MICROBATCH
    stem, hw = resnet_stem(b, dt)
    layers = [stem]
    cin = 64
    for stage, (n, planes) in enumerate(zip(RESNET_BLOCKS, RESNET_PLANES)):
        for i in range(n):
            stride = 2 if (i == 0 and stage > 0) else 1
            layer, hw = resnet_bottleneck(f"conv{stage + 2}_{i + 1}", b, cin, planes, stride, hw,
                                          dt)
            layers.append(layer)
            cin = 4 * planes
    layers.append(resnet_head(b, dt, hw))
    return layers


RESNET_DESCRIPTION = (
    "ResNet-152 (He et al. 2016; torchvision v1.5 layout, stride on the 3x3 conv) at 224x224, "
    f"micro-batch {RESNET_MICROBATCH} images, bf16 mixed precision: layers are the stem "
    "(conv 7x7/2 + BN + ReLU + max-pool 3x3/2), the 50 bottleneck blocks conv2_1..conv5_3 "
    "(3/8/36/3) and the head (global average pool + fc 1000 + loss); a layer's activation bytes "
    "are what its forward adds and keeps: the BN inputs and ReLU outputs it saves and its output "
    "(a block's last ReLU output), not its input")


# --------------------------------------------------------------------------------------------
# Tiny character-level GPT for the CPU default
# --------------------------------------------------------------------------------------------

TINY = TransformerSpec(
    "tiny-gpt", "tiny character-level GPT", 4, 64, 2, 64, 96, 256, 64, "gpt", False, 8, "fp32",
    0.0,
    "tiny character-level GPT: vocabulary 96, s=64, h=64, 2 heads, 4 pre-LN blocks (FFN 256), "
    "learned positions (64), untied LM head")


# --------------------------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------------------------

def close(value, ref, tol):
    return abs(value - ref) <= tol * ref


def check_formulas():
    # Korthikanti et al. 2022: s*b*h*(34 + 5*a*s/h) bytes per block in 16-bit.
    for s, b, h, a in [(2048, 1, 12288, 96), (512, 1, 1024, 16), (1024, 4, 1600, 25)]:
        got = transformer_block_activation_bytes(s, b, h, a, 4 * h, 2)
        assert got == s * b * h * 34 + 5 * a * s * s * b, (s, b, h, a, got)
        # the same tensors at 4 bytes (fp32) with 1-byte masks: s*b*h*(66 + 9*a*s/h)
        got = transformer_block_activation_bytes(s, b, h, a, 4 * h, 4)
        assert got == s * b * h * 66 + 9 * a * s * s * b, (s, b, h, a, got)
    # Narayanan et al. 2021: forward FLOPs of a block 24*b*s*h^2*(1 + s/(6h)); backward = 2x.
    for s, b, h, a in [(2048, 1, 12288, 96), (1024, 2, 1600, 25)]:
        f, bi, bw = matmul_flops(transformer_block("x", s, b, h, a, 4 * h, 2))
        want = 24 * b * s * h * h * (1 + s / (6 * h))
        assert close(f, want, 1e-12) and close(bi + bw, 2 * want, 1e-12), (f, want)
        assert close(bw, 24 * b * s * h * h, 1e-12)   # W: only the four weight GEMMs


def check_transformer(spec: TransformerSpec, layers):
    total = sum(l.params for l in layers)
    tied = total - (spec.vocab * spec.hidden if spec.tied_in_original else 0)
    if spec.reference_params:
        assert close(tied, spec.reference_params, 0.03), (spec.key, tied, spec.reference_params)
    if spec.style == "gpt":
        # Whole-model FLOPs per iteration without recomputation (Narayanan et al. 2021
        # counts 4 passes with recomputation: 96*B*s*l*h^2*(1 + s/(6h) + V/(16lh))).
        b, s, l, h, v = spec.microbatch, spec.seq, spec.layers, spec.hidden, spec.vocab
        got = sum(sum(matmul_flops(x)) for x in layers)
        want = 72 * b * s * l * h * h * (1 + s / (6 * h) + v / (12 * l * h))
        assert close(got, want, 1e-9), (spec.key, got, want)
    if spec.key == "gpipe-transformer-103":
        # The GPipe Table 1 family: L=3 -> 282.2M, L=1663 -> 83.9B parameters.
        for n, ref in [(3, 282.2e6), (13, 785.8e6), (415, 21.0e9), (1663, 83.9e9)]:
            count = total + (n - spec.layers) * layers[1].params
            assert close(count, ref, 0.005), (n, count, ref)
    return total


def check_resnet(layers):
    total = sum(l.params for l in layers)
    assert total == 60_192_808, total            # torchvision resnet152: 60,192,808 parameters
    assert len(layers) == 52
    fwd_gflops = sum(matmul_flops(l)[0] for l in layers) / RESNET_MICROBATCH / 1e9
    assert close(fwd_gflops, 23.0, 0.03), fwd_gflops   # ~11.5 GMACs per 224x224 image
    return total


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------

def sig(x: float) -> float:
    return float(f"{x:.{SIG_DIGITS}g}")


def bytes_per(dtype: str) -> int:
    return {"bf16": 2, "fp16": 2, "fp32": 4}[dtype]


def layer_rows(layers, dev: Device, dtype, collectives=False):
    rows = []
    for l in layers:
        fwd, bwd, bwt = layer_times(l, dev)
        row = {
            "name": l.name,
            "forward_ms": sig(fwd),
            "backward_ms": sig(bwd),
            "backward_weight_ms": sig(bwt),
            "param_bytes": l.params * bytes_per(dtype),
            "activation_bytes": int(l.activation_bytes),
            "output_bytes": int(l.output_bytes),
        }
        if collectives:
            row["forward_collective_bytes"] = int(round(l.forward_collective_bytes))
            row["backward_collective_bytes"] = int(round(l.backward_collective_bytes))
        rows.append(row)
    return rows


def profile_dict(model, dev: Device, microbatch, dtype, input_bytes, source, layers, tp_layers=None):
    """`tp_layers`: {tp: layers} for tensor_parallel_measurements (each device's share)."""
    rows = layer_rows(layers, dev, dtype)
    doc = {
        "format": PROFILE_FORMAT,
        "model": model,
        "device": dev.name,
        "microbatch_size": microbatch,
        "dtype": dtype,
        "input_bytes": int(input_bytes),
        "source": source,
        "layers": rows,
    }
    if tp_layers:
        doc["tensor_parallel_measurements"] = [
            {"tensor_parallel": tp, "input_bytes": int(input_bytes),
             "layers": layer_rows(tl, dev, dtype, collectives=True)}
            for tp, tl in sorted(tp_layers.items())]
    return doc


def render(doc: dict) -> str:
    """JSON with one line per top-level field and one line per layer (readable, diffable)."""
    lines = ["{"]
    items = list(doc.items())
    for i, (k, v) in enumerate(items):
        comma = "," if i + 1 < len(items) else ""
        if k == "layers":
            lines.append(f' "layers": [')
            for j, row in enumerate(v):
                rc = "," if j + 1 < len(v) else ""
                lines.append("  " + json.dumps(row, separators=(", ", ": ")) + rc)
            lines.append(" ]" + comma)
        elif k == "tensor_parallel_measurements":
            lines.append(f' "tensor_parallel_measurements": [')
            for j, point in enumerate(v):
                pc = "," if j + 1 < len(v) else ""
                lines.append(f'  {{"tensor_parallel": {point["tensor_parallel"]}, '
                             f'"input_bytes": {point["input_bytes"]}, "layers": [')
                for m, row in enumerate(point["layers"]):
                    rc = "," if m + 1 < len(point["layers"]) else ""
                    lines.append("   " + json.dumps(row, separators=(", ", ": ")) + rc)
                lines.append("  ]}" + pc)
            lines.append(" ]" + comma)
        else:
            body = json.dumps(v, indent=1).replace("\n", "\n ")
            lines.append(f" {json.dumps(k)}: {body}{comma}")
    lines.append("}")
    text = "\n".join(lines) + "\n"
    assert json.loads(text) == doc
    return text


def common_source(dev: Device, cpu=False):
    if cpu:
        rates = (f"Times are an analytic estimate from {dev.citation}; per op time = "
                 "max(FLOPs / 20 GFLOP/s, bytes / 10 GB/s), summed over the ops of a layer.")
    else:
        rates = (f"Device: {dev.citation}; assumed achieved {dev.matmul_eff:.0%} of peak for "
                 f"GEMMs/convolutions ({dev.peak_flops * dev.matmul_eff / 1e12:g} TFLOPS) and "
                 f"{dev.bandwidth_eff:.0%} of HBM bandwidth "
                 f"({dev.bandwidth * dev.bandwidth_eff / 1e12:.4g} TB/s) for memory traffic; "
                 "per op time = max(FLOPs / achieved FLOPS, bytes / achieved bandwidth), summed "
                 "over the ops of a layer (no kernel-launch overhead, no fused attention).")
    return rates


TRANSFORMER_FORMULAS = (
    "Block forward FLOPs 24*b*s*h^2*(1 + s/(6h)) (Narayanan et al. 2021), backward 2x forward, "
    "of which the weight gradient (backward_weight_ms) is the four weight GEMMs' 24*b*s*h^2; "
    "elementwise work (layer norms, softmax, GELU, dropout, residual adds, embedding gathers and "
    "the dense embedding gradient) is memory-bound. Activation bytes (what a layer's forward adds "
    "and keeps for its backward: the tensors saved other than its input, and its output; the "
    "input is counted once, by the layer before or by the stage) without recomputation: "
    "{act} (Korthikanti's count includes the block's input, the same size as the output that "
    "replaces it here); the embedding's dropout mask and output; for the head its LM-head input, "
    "the fp32 logits kept by the loss (4*s*b*V bytes, as in Korthikanti et al.) and the loss. "
    "param_bytes: {pb} bytes per parameter; "
    "output_bytes: {ob}*s*b*h for embedding and blocks, 4 (fp32 loss) for the head. "
    "input_bytes: {inp}.")


def transformer_source(spec: TransformerSpec, dev: Device, cpu=False):
    dt = bytes_per(spec.dtype)
    inp = ("int64 token ids and token-type ids, 2*8*s*b" if spec.style == "bert"
           else "int64 token ids, 8*s*b")
    if dt == 2:
        act = "s*b*h*(34 + 5*a*s/h) per block in 16-bit (Korthikanti et al. 2022)"
    else:
        act = (f"s*b*h*({16 * dt + 2} + {2 * dt + 1}*a*s/h) per block, i.e. the tensors "
               f"counted by Korthikanti et al. 2022 at {dt} bytes each plus 1-byte dropout masks")
    text = (f"Analytic profile for {spec.description}; micro-batch {spec.microbatch}, "
            f"{spec.dtype}. "
            + TRANSFORMER_FORMULAS.format(pb=dt, ob=dt, inp=inp, act=act) + " "
            + common_source(dev, cpu)
            + f" Generated by `{GENERATOR_COMMAND}`; see profiles/README.md.")
    if cpu:
        text = ("ANALYTIC ESTIMATE, NOT MEASURED: replace with a measured profile once the "
                "profiler lands. ") + text
    return text


def resnet_source(dev: Device):
    return (f"Analytic profile for {RESNET_DESCRIPTION}. Convolution FLOPs 2*N*Hout*Wout*Cout*"
            "Cin*k*k forward, backward 2x forward (input gradient + weight gradient; the stem "
            "conv has no input gradient), weight gradient = backward_weight_ms; batch norm, "
            "ReLU, pooling and adds are memory-bound. Activation bytes without recomputation: "
            "every tensor the layer saves for backward (layer input, BN inputs, ReLU outputs, "
            "max-pool int64 indices, fp32 softmax in the head). param_bytes: 2 bytes per "
            "parameter (BN gamma/beta counted, running statistics not); output_bytes: the bf16 "
            "feature map sent onward, 4 (fp32 loss) for the head; input_bytes: bf16 images "
            "N*3*224*224*2. " + common_source(dev)
            + f" Generated by `{GENERATOR_COMMAND}`; see profiles/README.md.")


@dataclasses.dataclass(frozen=True)
class Link:
    bandwidth: float
    latency_ms: float


CLUSTERS = [
    # (name, device, devices, intra-node link, devices per node, inter-node link, source)
    ("a100-80gb-8", DEVICES[0], 8, Link(300e9, 0.01), None, None,
     "One DGX A100 / HGX A100 node: 8 x A100-80GB SXM. Link: third-generation NVLink through "
     "NVSwitch, 600 GB/s total per GPU = 300 GB/s per direction (NVIDIA A100 datasheet), nominal "
     "(NCCL point-to-point typically reaches ~80% of it); latency 0.01 ms is a typical NCCL "
     "small-message send/recv latency inside a node, not the wire latency."),
    ("a100-80gb-32", DEVICES[0], 32, Link(300e9, 0.01), 8, Link(25e9, 0.02),
     "Four DGX A100-class nodes of 8 x A100-80GB SXM. Intra-node link: NVLink3 via NVSwitch, "
     "300 GB/s per direction (nominal), 0.01 ms. Inter-node link: one InfiniBand HDR 200 Gb/s "
     "adapter per GPU (DGX A100 has 8 compute HCAs) = 25 GB/s per direction nominal; latency "
     "0.02 ms, a typical NCCL small-message send/recv latency across nodes (wire latency is "
     "~0.002 ms, NCCL's proxy and protocol add the rest)."),
    ("h100-80gb-8", DEVICES[1], 8, Link(450e9, 0.01), None, None,
     "One DGX H100 / HGX H100 node: 8 x H100-80GB SXM5. Link: fourth-generation NVLink through "
     "NVSwitch, 900 GB/s total per GPU = 450 GB/s per direction (NVIDIA H100 datasheet), "
     "nominal; latency 0.01 ms, a typical NCCL small-message send/recv latency inside a node."),
    ("h100-80gb-32", DEVICES[1], 32, Link(450e9, 0.01), 8, Link(50e9, 0.02),
     "Four DGX H100-class nodes of 8 x H100-80GB SXM5. Intra-node link: NVLink4 via NVSwitch, "
     "450 GB/s per direction (nominal), 0.01 ms. Inter-node link: one InfiniBand NDR 400 Gb/s "
     "adapter per GPU (ConnectX-7) = 50 GB/s per direction nominal; latency 0.02 ms, a typical "
     "NCCL small-message send/recv latency across nodes."),
    ("h200-141gb-8", DEVICES[2], 8, Link(450e9, 0.01), None, None,
     "One HGX H200 node: 8 x H200-141GB SXM. Link: fourth-generation NVLink through NVSwitch, "
     "900 GB/s total per GPU = 450 GB/s per direction (NVIDIA H200 datasheet), nominal; latency "
     "0.01 ms, a typical NCCL small-message send/recv latency inside a node."),
    ("cpu-2", CPU_1_THREAD, 2, Link(2e9, 0.05), None, None,
     "Two CPU processes on one host (the built-in default for tests and the tiny model), 8 GiB "
     "of memory each; link: loopback (Gloo over TCP on localhost), assumed 2 GB/s and 0.05 ms "
     "per message. Assumed values, not measured."),
]


def cluster_dict(name, dev: Device, n, link: Link, per_node, inter: Link | None, source):
    doc = {
        "format": CLUSTER_FORMAT,
        "name": name,
        "devices": n,
        "device_memory_bytes": dev.memory_bytes,
        "link": {"bandwidth_bytes_per_s": int(link.bandwidth), "latency_ms": link.latency_ms},
    }
    if per_node is not None:
        assert n % per_node == 0
        doc["nodes"] = {"devices_per_node": per_node,
                        "inter_node_link": {"bandwidth_bytes_per_s": int(inter.bandwidth),
                                            "latency_ms": inter.latency_ms}}
    mem = ("" if dev is CPU_1_THREAD
           else f" Memory: {dev.memory_bytes / 1e9:g} GB per device (datasheet capacity in decimal "
                "bytes; the physical memory is slightly larger, and the difference is left as "
                "headroom for the CUDA context and allocator).")
    doc["source"] = (source + f"{mem} Bandwidths are bytes per second per direction "
                     f"between two ranks. Generated by `{GENERATOR_COMMAND}`; see "
                     "profiles/README.md.")
    return doc


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------

def summary(path, layers, doc):
    params = sum(l.params for l in layers)
    ms = sum(r["forward_ms"] + r["backward_ms"] for r in doc["layers"])
    act = sum(r["activation_bytes"] for r in doc["layers"])
    return (f"{path}: {len(layers)} layers, {params / 1e6:,.2f}M params, "
            f"fwd+bwd {ms:.6g} ms per micro-batch, activations {act / 2**30:.4g} GiB per "
            "micro-batch")


def build_all():
    """Return [(relative path, text, summary line)] in a fixed order."""
    check_formulas()
    out = []
    for spec in TRANSFORMERS:
        layers = transformer_layers(spec, bytes_per(spec.dtype))
        check_transformer(spec, layers)
        for dev in DEVICES:
            tp_layers = {tp: transformer_layers(spec, bytes_per(spec.dtype), tp)
                         for tp in tensor_parallel_sizes(spec)}
            doc = profile_dict(spec.key, dev, spec.microbatch, spec.dtype,
                               transformer_input_bytes(spec), transformer_source(spec, dev),
                               layers, tp_layers)
            path = f"{spec.key}-{dev.key}.json"
            out.append((path, render(doc), summary(path, layers, doc)))
    layers = resnet152_layers(2)
    check_resnet(layers)
    for dev in DEVICES:
        doc = profile_dict("resnet152", dev, RESNET_MICROBATCH, "bf16",
                           RESNET_MICROBATCH * 3 * RESNET_IMAGE * RESNET_IMAGE * 2,
                           resnet_source(dev), layers)
        path = f"resnet152-{dev.key}.json"
        out.append((path, render(doc), summary(path, layers, doc)))
    layers = transformer_layers(TINY, bytes_per(TINY.dtype))
    assert check_transformer(TINY, layers) == 216_448   # 10240 + 4 * 49984 + 6272, by hand
    doc = profile_dict(TINY.key, CPU_1_THREAD, TINY.microbatch, TINY.dtype,
                       transformer_input_bytes(TINY), transformer_source(TINY, CPU_1_THREAD, True),
                       layers)
    out.append(("tiny-gpt-cpu.json", render(doc), summary("tiny-gpt-cpu.json", layers, doc)))
    for name, dev, n, link, per_node, inter, source in CLUSTERS:
        doc = cluster_dict(name, dev, n, link, per_node, inter, source)
        path = f"clusters/{name}.json"
        line = (f"{path}: {n} devices x {dev.memory_bytes} bytes, link "
                f"{link.bandwidth / 1e9:g} GB/s {link.latency_ms:g} ms"
                + (f", {n // per_node} nodes x {per_node}, inter-node {inter.bandwidth / 1e9:g} "
                   f"GB/s {inter.latency_ms:g} ms" if per_node else ""))
        out.append((path, render(doc), line))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a shipped file differs from the generator")
    parser.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)),
                        help="output folder (default: the folder of this script, profiles/)")
    args = parser.parse_args(argv)
    stale = []
    for rel, text, line in build_all():
        path = os.path.join(args.out, rel)
        if args.check:
            try:
                with open(path, encoding="utf-8") as f:
                    same = f.read() == text
            except FileNotFoundError:
                same = False
            if not same:
                stale.append(rel)
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        print(line)
    if args.check:
        if stale:
            print("out of date (run python3 profiles/generate.py): " + ", ".join(stale))
            return 1
        print("all generated files are up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
