"""A gpipe-plan/1 plan trained in PyTorch's own pipeline runtime (torch.distributed.pipelining).

On each rank of a torchrun job (K x D processes) this module

  1. reads the plan (docs/formats.md, "Plan") and the model file (gpipe-model/1) that names the
     user's builder, "python": "file.py:function" (or "torchscript": "net.pt");
  2. builds the whole model seeded as `gpipe-plan run` builds it (torch.manual_seed(seed), then the
     function), so every rank and our executor start from the same weights, and keeps the
     children that the plan's stages place on this rank, one PipelineStage per stage (several on
     an interleaved or V rank);
  3. runs the plan's order in PyTorch's runtime: `gpipe-plan export PLAN --format pytorch-csv`
     loaded with `_PipelineScheduleRuntime._load_csv` (runtime="csv"; "csv-comms" takes the CSV
     with our sends and receives, PyTorch's "compute_comms"), or the PyTorch class that plans the
     same order (runtime="class": ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B,
     ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble, ScheduleDualPipeV);
  4. trains as `gpipe-plan run` does: step t's global batch drawn from (seed, t) as
     executor/data.cpp draws it, the loss the cross-entropy over the last dimension, each
     micro-batch's loss scaled by 1/(M x D) before its backward, a parameter that several ranks
     hold (GPT-2's tied embedding and LM head) summed over them after the step's backwards, the
     replicas' gradients summed, clipping by the global norm (a tied parameter counted once),
     the model file's "training" section (AdamW or SGD, warm-up, linear or cosine decay).

What differs from `gpipe-plan run`: PyTorch runs the eager modules where our executor runs their
TorchScript traces (the same ATen operations), and torch.optim.AdamW moves its first moment with
lerp_ where LibTorch's AdamW multiplies and adds: the same value to a float32 rounding, which is
all that tests/python/torch_runtime_test.py finds between the two (with LibTorch's update passed
as optimizer_fn, the losses are ours bit for bit). A sharded optimizer (ZeRO-1) runs here as the
ordinary optimizer on every replica: the same update, without the memory saving.

Around PyTorch 2.11: a V rank's two middle stages are neighbours on one rank, and PyTorch's
first-step warm-up sends from such a stage to itself, which Gloo cannot; that warm-up leaves its
own rank out here. A "compute_comms" CSV runs only where every rank posts its receives from a
peer in the order the peer sends (PyTorch sends untagged; `export --with-communication` writes
them so), and is refused otherwise. A stage
boundary carrying an integer tensor cannot run in PyTorch's PipelineStage, and is refused.

Use it under torchrun (PYTHONPATH=python, or the pip package):

  torchrun --nproc-per-node 2 -m gpipe_plan.torch plan.json --model models/examples/gpt2.json --steps 5

or from your own script, on every rank:

  from gpipe_plan.torch import train
  losses = train("plan.json", "models/examples/gpt2.json", steps=5)

The schedule CSV comes from the gpipe-plan binary (`binary=`, else $GPIPE_PLAN, else `gpipe-plan`
on PATH), or without one from gpipe_plan's compiled core (`pip install .`); runtime="class"
needs neither (the plan's cut, PyTorch's order).
"""
import contextlib
import csv
import datetime
import importlib.util
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

if __name__ == "__main__":
    # Run as a file (python python/gpipe_plan/torch.py), this folder is sys.path[0] and this file
    # would shadow the torch package: drop it (python -m gpipe_plan.torch does not need this).
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]

import torch  # noqa: E402  (PyTorch, not this module: absolute import)
import torch.distributed as dist  # noqa: E402

PLAN_FORMAT = "gpipe-plan/1"
MODEL_FORMAT = "gpipe-model/1"
SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "interleaved-zb", "zb-v", "dualpipe-v")
V_SCHEDULES = ("zb-v", "dualpipe-v")
LOOP_SCHEDULES = ("interleaved-1f1b", "interleaved-zb")
RUNTIMES = ("csv", "csv-comms", "class")
# The PyTorch class that plans each schedule's order (the same names `export` writes).
PYTORCH_CLASS = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B", "interleaved-1f1b": "ScheduleInterleaved1F1B",
                 "zb-h1": "ScheduleInterleavedZeroBubble", "interleaved-zb": "ScheduleInterleavedZeroBubble",
                 "zb-v": "ScheduleZBVZeroBubble", "dualpipe-v": "ScheduleDualPipeV"}
MASK64 = (1 << 64) - 1


class PlanError(Exception):
    """A bad plan, model file, option or environment: one line naming the field and the fix."""


# ------------------------------------------------------------------------------------------------
# Files
# ------------------------------------------------------------------------------------------------

def _read_json(path, what):
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        raise PlanError(f"{path}: cannot read the {what}: {e.strerror}")
    except ValueError as e:
        raise PlanError(f"{path}: the {what} is not JSON: {e}")


def _whole(doc, key, where, minimum=None, default=None):
    value = doc.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlanError(f"{where}.{key}: {value!r}; give a whole number")
    if minimum is not None and value < minimum:
        raise PlanError(f"{where}.{key}: {value}; it must be at least {minimum}")
    return value


def load_plan(path):
    """The plan as a dict, checked for what this module runs; `stages` become
    [{"stage", "first", "end", "rank", "remat_layers"}] and `layer_count` is its profile's."""
    doc = _read_json(path, "plan")
    where = os.path.basename(path)
    if not isinstance(doc, dict) or doc.get("format") != PLAN_FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else doc
        raise PlanError(f"{where}.format: {got!r}; expected \"{PLAN_FORMAT}\" (a file from `gpipe-plan plan -o`)")
    schedule = doc.get("schedule")
    if schedule not in SCHEDULES:
        raise PlanError(f"{where}.schedule: {schedule!r}; expected one of {', '.join(SCHEDULES)}")
    m = _whole(doc, "microbatches", where, 1)
    batch = _whole(doc, "global_batch", where, 1)
    replicas = _whole(doc, "replicas", where, 1, default=1)
    if batch % (replicas * m) != 0:
        raise PlanError(f"{where}.global_batch: {batch} does not split into replicas x microbatches = "
                        f"{replicas} x {m} micro-batches of whole samples; plan again with another --global-batch")
    t = doc.get("tensor_parallel", 1)
    if t != 1:
        raise PlanError(f"{where}.tensor_parallel: {t}; gpipe_plan.torch runs t = 1 only (PyTorch's tensor "
                        f"parallelism is yours to add); plan with --tensor-parallel 1")
    placement = doc.get("placement", "pipeline-major")
    if placement not in ("pipeline-major", "replica-major"):
        raise PlanError(f"{where}.placement: {placement!r}; expected pipeline-major or replica-major")
    profile = doc.get("profile")
    if isinstance(profile, str):
        profile = _read_json(os.path.join(os.path.dirname(os.path.abspath(path)), profile), "plan's profile")
    if not isinstance(profile, dict) or not isinstance(profile.get("layers"), list):
        raise PlanError(f"{where}.profile: no profile with layers; plan with `gpipe-plan plan --profile ...`")
    layer_count = len(profile["layers"])
    precision = doc.get("precision", profile.get("dtype", "fp32"))
    if precision not in ("fp32", "bf16"):
        raise PlanError(f"{where}.precision: {precision!r}; gpipe_plan.torch runs fp32 and bf16 (fp16 needs our "
                        f"executor's dynamic loss scale); plan from an fp32 or bf16 profile")
    optimizer = doc.get("optimizer", "adam" if precision == "fp32" else "adam-mixed")
    if optimizer not in ("sgd", "momentum", "adam", "adam-mixed"):
        raise PlanError(f"{where}.optimizer: {optimizer!r}; expected sgd, momentum, adam or adam-mixed")
    raw = doc.get("stages")
    if not isinstance(raw, list) or not raw:
        raise PlanError(f"{where}.stages: missing or empty; a plan lists its stages")
    stages, expected = [], 0
    for s, st in enumerate(raw):
        here = f"{where}.stages[{s}]"
        layers = st.get("layers") if isinstance(st, dict) else None
        if not (isinstance(layers, list) and len(layers) == 2 and all(isinstance(v, int) for v in layers)):
            raise PlanError(f"{here}.layers: {layers!r}; give [first, end)")
        first, end = layers
        if first != expected or end <= first:
            raise PlanError(f"{here}.layers: [{first}, {end}) should start at layer {expected} and hold at least "
                            f"one layer; stages are contiguous and cover every layer")
        rank = _whole(st, "rank", here, 0)
        remat_layers = 0
        if "remat_layers" in st:
            remat_layers = _whole(st, "remat_layers", here, 0)
            if remat_layers > end - first:
                raise PlanError(f"{here}.remat_layers: {remat_layers}; the stage holds {end - first} layers")
        elif st.get("remat", False):
            remat_layers = end - first
        stages.append({"stage": s, "first": first, "end": end, "rank": rank, "remat_layers": remat_layers})
        expected = end
    if expected != layer_count:
        raise PlanError(f"{where}.stages: they end at layer {expected}, its profile has {layer_count} layers")
    ranks = sorted({st["rank"] for st in stages})
    k = len(ranks)
    if ranks != list(range(k)):
        raise PlanError(f"{where}.stages[].rank: ranks {ranks}; number them 0..K-1 without gaps")
    per_rank = len(stages) // k
    if schedule in V_SCHEDULES:
        want = [s if s < k else 2 * k - 1 - s for s in range(2 * k)]
    elif schedule in LOOP_SCHEDULES:
        want = [s % k for s in range(len(stages))] if len(stages) % k == 0 else None
    else:
        want = list(range(k))
    if want is None or [st["rank"] for st in stages] != want:
        raise PlanError(f"{where}.stages[].rank: {[st['rank'] for st in stages]}; {schedule} places stage s on rank "
                        f"{want if want else 's mod K, v stages per rank'} (docs/formats.md, the placement table)")
    return {"path": os.path.abspath(path), "schedule": schedule, "microbatches": m, "global_batch": batch,
            "replicas": replicas, "placement": placement, "precision": precision, "optimizer": optimizer,
            "sharded_optimizer": bool(doc.get("sharded_optimizer", False)), "stages": stages, "ranks": k,
            "stages_per_rank": per_rank, "layer_count": layer_count}


def device_of(plan, replica, rank):
    """The process rank of pipeline rank `rank` of replica `replica` (docs/formats.md, placement)."""
    if plan["placement"] == "replica-major":
        return rank * plan["replicas"] + replica
    return replica * plan["ranks"] + rank


def load_model_file(path):
    """The gpipe-model/1 file as a dict with absolute paths and the defaults our executor uses."""
    doc = _read_json(path, "model file")
    where = os.path.basename(path)
    base = os.path.dirname(os.path.abspath(path))
    if not isinstance(doc, dict) or doc.get("format") != MODEL_FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else doc
        raise PlanError(f"{where}.format: {got!r}; expected \"{MODEL_FORMAT}\" (docs/formats.md, \"Model\")")
    if "python" in doc:
        spec = doc["python"]
        if not isinstance(spec, str) or not spec:
            raise PlanError(f"{where}.python: {spec!r}; give \"file.py:function\"")
        source, _, function = spec.partition(":")
        builder = ("python", os.path.join(base, source), function or "build")
    elif "torchscript" in doc:
        builder = ("torchscript", os.path.join(base, doc["torchscript"]), None)
    else:
        raise PlanError(f"{where}: built-in \"layers\" are our executor's LibTorch layers; gpipe_plan.torch builds "
                        f"PyTorch modules: name a function returning an nn.Sequential as \"python\": "
                        f"\"file.py:build\" (docs/your-model.md)")
    seed = doc.get("seed", 1234)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise PlanError(f"{where}.seed: {seed!r}; give a whole number >= 0")
    inp = doc.get("input")
    if not isinstance(inp, dict) or inp.get("kind") not in ("tokens", "images"):
        raise PlanError(f"{where}.input: {inp!r}; give {{\"kind\": \"tokens\", \"vocab\", \"seq_len\"}} or "
                        f"{{\"kind\": \"images\", \"channels\", \"height\", \"width\", \"classes\"}}")
    keys = ("vocab", "seq_len") if inp["kind"] == "tokens" else ("channels", "height", "width", "classes")
    for key in keys:
        _whole(inp, key, f"{where}.input", 1)
    data = doc.get("data")
    if data is None:
        if inp["kind"] == "tokens":
            raise PlanError(f"{where}.data: missing; a tokens model names its data (docs/formats.md, \"data\")")
        data = {"kind": "synthetic-images"}
    data = dict(data)
    for key in ("path", "images", "labels"):
        if key in data:
            data[key] = os.path.join(base, data[key])
    training = dict(doc.get("training") or {})
    if "learning_rate" in doc:
        if "learning_rate" in training:
            raise PlanError(f"{where}.learning_rate: given here and in training; keep training.learning_rate")
        training["learning_rate"] = doc["learning_rate"]
    loss = doc.get("loss", "cross-entropy")
    if loss != "cross-entropy":
        raise PlanError(f"{where}.loss: {loss!r}; the only loss is \"cross-entropy\" (or pass loss_fn= to train())")
    return {"path": os.path.abspath(path), "name": doc.get("name", where), "builder": builder, "seed": seed,
            "input": inp, "data": data, "training": _training(training, where)}


def _training(t, where):
    known = {"learning_rate", "betas", "eps", "weight_decay", "decay_1d", "momentum", "clip_grad_norm", "schedule"}
    for key in t:
        if key not in known:
            raise PlanError(f"{where}.training.{key}: not a field; expected one of {', '.join(sorted(known))}")
    s = dict(t.get("schedule") or {})
    out = {"learning_rate": float(t.get("learning_rate", 1e-3)), "betas": tuple(t.get("betas", (0.9, 0.999))),
           "eps": float(t.get("eps", 1e-8)), "weight_decay": float(t.get("weight_decay", 0.0)),
           "decay_1d": bool(t.get("decay_1d", False)), "momentum": float(t.get("momentum", 0.9)),
           "clip_grad_norm": float(t.get("clip_grad_norm", 0.0)),
           "warmup_steps": int(s.get("warmup_steps", 0)), "decay": s.get("decay", "constant"),
           "decay_steps": int(s.get("decay_steps", 0)), "min_learning_rate": float(s.get("min_learning_rate", 0.0))}
    if out["decay"] not in ("constant", "linear", "cosine"):
        raise PlanError(f"{where}.training.schedule.decay: {out['decay']!r}; expected constant, linear or cosine")
    return out


def learning_rate_at(training, step):
    """core/training.cpp's LearningRateAt."""
    peak = training["learning_rate"]
    if step < training["warmup_steps"]:
        return peak * (step + 1) / training["warmup_steps"]
    if training["decay"] == "constant":
        return peak
    if step >= training["decay_steps"]:
        return training["min_learning_rate"]
    progress = (step - training["warmup_steps"]) / (training["decay_steps"] - training["warmup_steps"])
    fraction = 1.0 - progress if training["decay"] == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
    return training["min_learning_rate"] + fraction * (peak - training["min_learning_rate"])


# ------------------------------------------------------------------------------------------------
# The model
# ------------------------------------------------------------------------------------------------

def build_model(model, seed=None):
    """The user's model as our exporter builds it: torch.manual_seed(seed), then the function
    (executor/export_model.py). Returns [(name, child), ...], the pipeline's layers."""
    kind, source, function = model["builder"]
    where = os.path.basename(model["path"])
    if kind == "torchscript":
        try:
            root = torch.jit.load(source)
        except Exception as e:  # noqa: BLE001 -- one line naming the file
            raise PlanError(f"{where}.torchscript: {source}: {type(e).__name__}: {str(e).splitlines()[0]}")
        return list(root.named_children())
    if not os.path.isfile(source):
        raise PlanError(f"{where}.python: {source}: no such file")
    folder = os.path.dirname(source)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = os.path.splitext(os.path.basename(source))[0]
    spec = importlib.util.spec_from_file_location(name, source)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001
        raise PlanError(f"{where}.python: importing {source} failed: {type(e).__name__}: {e}")
    fn = getattr(module, function, None)
    if not callable(fn):
        raise PlanError(f"{where}.python: {source} has no function {function!r}")
    torch.manual_seed((model["seed"] if seed is None else seed) & MASK64)
    net = fn()
    if not isinstance(net, torch.nn.Module):
        raise PlanError(f"{where}.python: {function}() returned {type(net).__name__}, not an nn.Sequential")
    children = list(net.named_children())
    if not children:
        raise PlanError(f"{where}.python: {function}() returned a {type(net).__name__} without children; its "
                        f"children are the layers")
    net.train()
    return children


class Chain(torch.nn.Module):
    """A stage: the plan's run of layers under their own names (so its state_dict names are the
    nn.Sequential's, `<i>.<name>`), each called with the previous one's outputs as positional
    tensors, as our executor calls them. The first `remat_layers` recompute their forward in
    the backward (torch.utils.checkpoint), as the plan's remat says."""

    def __init__(self, layers, remat_layers=0, autocast_dtype=None):
        super().__init__()
        for name, layer in layers:
            self.add_module(name, layer)
        self.remat_layers = remat_layers
        self.autocast_dtype = autocast_dtype

    def _run(self, start, end, *xs):
        for layer in list(self.children())[start:end]:
            out = layer(*xs)
            xs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        return xs

    def forward(self, *xs):
        n = len(list(self.children()))
        ctx = (torch.autocast(xs[0].device.type, dtype=self.autocast_dtype) if self.autocast_dtype
               else contextlib.nullcontext())
        with ctx:
            if self.remat_layers:
                from torch.utils.checkpoint import checkpoint
                xs = checkpoint(self._run, 0, self.remat_layers, *xs, use_reentrant=False)
                xs = xs if isinstance(xs, tuple) else (xs,)
            xs = self._run(self.remat_layers, n, *xs)
        return xs[0] if len(xs) == 1 else xs


def tied_parameters(layers):
    """[(parameter, [layer indices])] for parameters that several layers hold (GPT-2's wte and
    lm_head), in the order of their first holder, as the exporter finds ties."""
    holders = {}
    for i, (_, layer) in enumerate(layers):
        for p in layer.parameters():
            entry = holders.setdefault(id(p), (p, []))[1]
            if i not in entry:
                entry.append(i)
    return [(p, idx) for p, idx in holders.values() if len(idx) > 1]


# ------------------------------------------------------------------------------------------------
# The data: executor/data.cpp, draw for draw
# ------------------------------------------------------------------------------------------------

def _char_tokens(path):
    import numpy as np
    try:
        raw = np.fromfile(path, dtype=np.uint8)
    except OSError as e:
        raise PlanError(f"{path}: cannot read the training text: {e.strerror}")
    ids = np.where(raw == 10, 0, np.where((raw >= 32) & (raw <= 126), raw.astype(np.int64) - 31, 1))
    return torch.from_numpy(ids.astype(np.int64))


_MEGATRON_DTYPES = {1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 8: "uint16"}


def _token_array(data, where):
    import numpy as np
    kind = data["kind"]
    if kind == "tokens-file":
        dtype = data.get("dtype", "uint16")
        if dtype not in ("uint16", "uint32"):
            raise PlanError(f"{where}.data.dtype: {dtype!r}; expected uint16 or uint32")
        return np.memmap(data["path"], dtype="<" + ("u2" if dtype == "uint16" else "u4"), mode="r")
    prefix = data["path"]
    with open(prefix + ".idx", "rb") as f:
        head = f.read(34)
        if head[:9] != b"MMIDIDX\x00\x00":
            raise PlanError(f"{prefix}.idx: not Megatron's MMap index (no \"MMIDIDX\\0\\0\" header)")
        code = head[17]
        sequences = int.from_bytes(head[18:26], "little")
        sizes = np.frombuffer(f.read(4 * sequences), dtype="<i4")
    if code not in _MEGATRON_DTYPES:
        raise PlanError(f"{prefix}.idx: dtype code {code} is not a token dtype (1-5, 8)")
    tokens = np.memmap(prefix + ".bin", dtype=np.dtype(_MEGATRON_DTYPES[code]).newbyteorder("<"), mode="r")
    if tokens.shape[0] != int(sizes.astype(np.int64).sum()):
        raise PlanError(f"{prefix}.bin: holds {tokens.shape[0]} tokens where its index lists {int(sizes.sum())}")
    return tokens


class Data:
    """Step t's global batch as `gpipe-plan run` draws it (executor/data.cpp): a generator seeded
    with (seed x 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019 x (t + 1)) mod 2^64 draws the window
    offsets (or the tokens, the images) in the same order."""

    def __init__(self, model, seed=None):
        self.model = model
        self.seed = model["seed"] if seed is None else seed
        self.inp = model["input"]
        data = model["data"]
        self.kind = data.get("kind")
        where = os.path.basename(model["path"])
        self.begin, self.end = 0, 0
        if self.kind == "text":
            self.text = _char_tokens(data["path"])
            self.end = self.text.shape[0]
        elif self.kind in ("tokens-file", "megatron"):
            self.tokens = _token_array(data, where)
            self.end = self.tokens.shape[0]
        elif self.kind == "npy-images":
            import numpy as np
            self.images = np.load(data["images"], mmap_mode="r")
            self.labels = np.load(data["labels"], mmap_mode="r")
            self.end = self.images.shape[0]
        elif self.kind == "synthetic-images":
            gen = torch.Generator().manual_seed((self.seed ^ 0xC1A55E5) & MASK64)
            i = self.inp
            self.prototypes = torch.randn(i["classes"], i["channels"], i["height"], i["width"], generator=gen)
        elif self.kind != "random-tokens":
            raise PlanError(f"{where}.data.kind: {self.kind!r}; expected text, tokens-file, megatron, npy-images, "
                            f"random-tokens or synthetic-images")
        fraction = float(data.get("validation_fraction", 0) or 0)
        if fraction > 0 and "validation" not in data:
            self.end -= int(self.end * fraction)

    def global_batch(self, step, size):
        """(input, target) of step `step`, `size` samples."""
        seed = (self.seed * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019 * (step + 1)) & MASK64
        gen = torch.Generator().manual_seed(seed)
        i = self.inp
        if self.kind in ("text", "tokens-file", "megatron"):
            seq = i["seq_len"]
            windows = self.end - self.begin - seq - 1
            offsets = torch.randint(0, windows + 1, (size, 1), generator=gen) + self.begin
            index = offsets + torch.arange(seq + 1).unsqueeze(0)
            if self.kind == "text":
                tokens = self.text[index]
            else:
                import numpy as np
                tokens = torch.from_numpy(np.asarray(self.tokens[index.numpy()]).astype(np.int64))
                if int(tokens.max()) >= i["vocab"] or int(tokens.min()) < 0:
                    raise PlanError(f"{self.model['data']['path']}: a token id outside the model's vocabulary of "
                                    f"{i['vocab']} at step {step}; is the file's dtype the tokenizer's?")
            return tokens[:, :seq], tokens[:, 1:]
        if self.kind == "random-tokens":
            x = torch.randint(0, i["vocab"], (size, i["seq_len"]), generator=gen)
            y = torch.randint(0, i["vocab"], (size, i["seq_len"]), generator=gen)
            return x, y
        if self.kind == "synthetic-images":
            target = torch.randint(0, i["classes"], (size,), generator=gen)
            noise = torch.randn(size, i["channels"], i["height"], i["width"], generator=gen)
            return self.prototypes[target] + 0.5 * noise, target
        import numpy as np
        indices = torch.randint(self.begin, self.end, (size,), generator=gen).numpy()
        pixels = torch.from_numpy(np.ascontiguousarray(self.images[indices]))
        target = torch.from_numpy(np.asarray(self.labels[indices]).astype(np.int64))
        return pixels.permute(0, 3, 1, 2).float().div_(255.0).contiguous(), target


def cross_entropy(output, target):
    """executor/layers.cpp's LossOf: cross-entropy over the last dimension, in fp32."""
    logits = output if output.dtype == torch.float32 else output.float()
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


# ------------------------------------------------------------------------------------------------
# The schedule
# ------------------------------------------------------------------------------------------------

def find_binary(binary=None):
    """The gpipe-plan binary: `binary`, else $GPIPE_PLAN, else gpipe-plan on PATH; None if none."""
    for candidate in (binary, os.environ.get("GPIPE_PLAN"), shutil.which("gpipe-plan")):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return os.path.abspath(candidate)
        if candidate == binary and binary:
            raise PlanError(f"binary {binary!r}: not an executable file; give the gpipe-plan binary "
                            f"(build/gpipe-plan) or leave it out to use $GPIPE_PLAN or PATH")
    return None


def export_schedule(plan_path, binary, folder, with_communication=False):
    """Runs `gpipe-plan export PLAN --format pytorch-csv` into `folder`; returns (csv path, the
    split points as gpipe-plan-stages/1)."""
    out = os.path.join(folder, "schedule.csv")
    cmd = [binary, "export", plan_path, "--format", "pytorch-csv", "-o", out]
    if with_communication:
        cmd.append("--with-communication")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise PlanError(f"{' '.join(cmd)} failed (exit {r.returncode}): {r.stderr.strip()}")
    return out, _read_json(os.path.join(folder, "schedule.stages.json"), "exported split points")


def _check_receive_order(csv_path, plan):
    """PyTorch's runtime sends and receives untagged (tag 0), so over Gloo the k-th receive a rank
    posts from a peer takes the k-th message that peer sent, whatever it was meant for: a
    compute_comms CSV is safe only where every rank posts its receives from each peer in the order
    the peer sends. (Our executor matches by tag, and needs no such order over Gloo.)"""
    import re
    rank_of = {st["stage"]: st["rank"] for st in plan["stages"]}
    sends, receives = {}, {}
    with open(csv_path, newline="") as f:
        for rank, row in enumerate(csv.reader(f)):
            for cell in row:
                a = re.fullmatch(r"\s*(\d+)(SEND_F|SEND_B|RECV_F|RECV_B)(\d+)\s*", cell)
                if not a:
                    continue
                stage, op, mb = int(a[1]), a[2], int(a[3])
                if op == "SEND_F":
                    sends.setdefault((rank, rank_of[stage + 1]), []).append(f"{stage + 1}RECV_F{mb}")
                elif op == "SEND_B":
                    sends.setdefault((rank, rank_of[stage - 1]), []).append(f"{stage - 1}RECV_B{mb}")
                elif op == "RECV_F":
                    receives.setdefault((rank_of[stage - 1], rank), []).append(f"{stage}RECV_F{mb}")
                else:
                    receives.setdefault((rank_of[stage + 1], rank), []).append(f"{stage}RECV_B{mb}")
    for (src, dst), sent in sorted(sends.items()):
        posted = receives.get((src, dst), [])
        for k, (want, got) in enumerate(zip(sent, posted)):
            if want != got:
                raise PlanError(
                    f"runtime 'csv-comms': in the exported CSV ({plan['schedule']}) rank {dst} posts {got} as its "
                    f"receive #{k} from rank {src}, which sends the message for {want} then; PyTorch's runtime "
                    f"sends untagged, so Gloo would hand it the wrong tensor: use runtime 'csv' (PyTorch lowers "
                    f"the compute-only CSV with its own sends and receives) or 'class'")


def _schedule_csv(plan, binary, folder, with_communication):
    """The plan's order as PyTorch's CSV in `folder`: (path, the format to load it with). From
    the gpipe-plan binary when one is given or found, else from gpipe_plan's compiled core (the
    pip package's gpipe_plan.export)."""
    if binary is not None:
        path, split = export_schedule(plan["path"], binary, folder, with_communication)
        for st in split["stages"]:
            mine = plan["stages"][st["stage"]]
            if [mine["first"], mine["end"], mine["rank"]] != [st["layers"][0], st["layers"][1], st["rank"]]:
                raise PlanError(f"{plan['path']}: the exported split points of stage {st['stage']} differ from the "
                                f"plan's; export with the binary that made the plan")
        return path, split["csv_format"]
    try:
        from gpipe_plan import export  # the compiled core, where gpipe_plan is pip-installed
        text = export(plan["path"], "pytorch-csv", with_communication)
    except ImportError:
        raise PlanError("runtime 'csv' needs the plan's order as PyTorch's CSV, from gpipe_plan's compiled core "
                        "(pip install . in the gpipe-plan checkout) or the gpipe-plan binary: pass binary=, set "
                        "$GPIPE_PLAN or put gpipe-plan on PATH; or use runtime='class' (PyTorch's own class)")
    except (RuntimeError, ValueError) as e:
        raise PlanError(f"{plan['path']}: exporting its schedule failed: {e}")
    path = os.path.join(folder, "schedule.csv")
    with open(path, "w") as f:
        f.write(text)
    return path, "compute_comms" if with_communication else "compute_only"


def _make_schedule(plan, stages, loss_fn, runtime, binary, folder):
    from torch.distributed.pipelining import schedules as S
    m = plan["microbatches"]
    if runtime in ("csv", "csv-comms"):
        csv_path, csv_format = _schedule_csv(plan, binary, folder, runtime == "csv-comms")
        if csv_format == "compute_comms":
            _check_receive_order(csv_path, plan)
        schedule = S._PipelineScheduleRuntime(stages, n_microbatches=m, loss_fn=loss_fn, scale_grads=False)
        schedule._load_csv(csv_path, format=csv_format)
        return schedule
    cls = getattr(S, PYTORCH_CLASS[plan["schedule"]])
    if plan["schedule"] in ("gpipe", "1f1b"):
        return cls(stages[0], n_microbatches=m, loss_fn=loss_fn, scale_grads=False)
    return cls(stages, n_microbatches=m, loss_fn=loss_fn, scale_grads=False)


# ------------------------------------------------------------------------------------------------
# Training
# ------------------------------------------------------------------------------------------------

def _init_process_group(device, timeout_s):
    if dist.is_initialized():
        return
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        # Not under torchrun: a job of one process (a plan with K x D = 1).
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    backend = "nccl" if device == "cuda" else "gloo"
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))


def _optimizer(plan, training, params, optimizer_fn=None):
    """Our executor's optimizer (executor/trainer.cpp's MakeOptimizer) as torch.optim's: two
    groups, the matrices with the weight decay and the one-dimensional parameters with it only
    under decay_1d."""
    matrices = [p for p in params if p.dim() >= 2]
    vectors = [p for p in params if p.dim() < 2]
    decay = training["weight_decay"]
    vector_decay = decay if training["decay_1d"] else 0.0
    groups = [g for g in ({"params": matrices, "weight_decay": decay},
                          {"params": vectors, "weight_decay": vector_decay}) if g["params"]]
    lr = learning_rate_at(training, 0)
    if optimizer_fn is not None:
        return optimizer_fn(groups, dict(training, learning_rate=lr, optimizer=plan["optimizer"]))
    if plan["optimizer"] in ("sgd", "momentum"):
        momentum = training["momentum"] if plan["optimizer"] == "momentum" else 0.0
        return torch.optim.SGD(groups, lr=lr, momentum=momentum)
    return torch.optim.AdamW(groups, lr=lr, betas=training["betas"], eps=training["eps"])


def _boundary_meta(layers, plan, first_input, device, autocast_dtype):
    """The meta tensors entering and leaving each stage, PipelineStage's explicit input_args and
    output_args: one forward of the model's layers on a micro-batch, without gradients, the
    buffers (batch norm's statistics) and the RNG restored after it."""
    buffers = [(b, b.detach().clone()) for _, layer in layers for b in layer.buffers()]
    rng = torch.get_rng_state()
    metas = []
    xs = (first_input.to(device),)
    with torch.no_grad():
        for st in plan["stages"]:
            chain = Chain([(str(i), layers[i][1]) for i in range(st["first"], st["end"])], 0, autocast_dtype)
            out = chain(*xs)
            ins, xs = xs, (tuple(out) if isinstance(out, (tuple, list)) else (out,))
            # Inputs as the runtime hands them over (a received buffer, a chunk of the batch: dense),
            # outputs as the stage makes them.
            metas.append((tuple(torch.empty(x.shape, dtype=x.dtype, device="meta") for x in ins),
                          tuple(x.to("meta") for x in xs)))
        for b, saved in buffers:
            b.copy_(saved)
    torch.set_rng_state(rng)
    return metas


def _skip_self_warmup(stage):
    """PyTorch 2.11 warms a stage's links up (its first step) with a send to and a receive from
    each neighbouring stage, also where the neighbour is on the same rank (the turn of a V:
    zb-v's and dualpipe-v's stages K-1 and K). The runtime itself hands such a stage's tensors
    over in memory, and Gloo cannot send to its own rank ("Pair is not connected"), so this
    stage's warm-up leaves its own rank out."""
    warmup = stage._get_init_p2p_neighbors_ops

    def without_self():
        return [op for op in warmup() if op.group_peer != stage.group_rank]

    stage._get_init_p2p_neighbors_ops = without_self


def train(plan_path, model_path, steps=10, seed=None, loss_fn=None, data=None, binary=None, runtime="csv",
          init_weights=None, threads=1, device="cpu", timeout_s=120, record=None, on_step=None, optimizer_fn=None):
    """Trains the plan for `steps` steps in PyTorch's pipeline runtime; call it on every rank of a
    job of K x D processes (torchrun). Returns the per-step losses (the mean over the global batch,
    the same list on every rank).

    seed: instead of the model file's seed (weights and data). loss_fn(output, target): a
    micro-batch's mean loss (default: cross-entropy as our executor's). data: a callable
    step -> (input, target) of the whole global batch, instead of the model file's data.
    binary: the gpipe-plan binary that exports the schedule CSV. runtime: "csv" (the exported
    order through _PipelineScheduleRuntime), "csv-comms" (with our sends and receives) or
    "class" (PyTorch's schedule class for the plan's schedule). init_weights: a safetensors file
    (`run --save-weights`, or saved from PyTorch) to start from. threads: intra-op threads per rank
    (our executor's --threads-per-rank; default 1). record: write a JSON record here (rank 0):
    steps[].loss/time_ms/learning_rate/grad_norm and throughput_samples_per_s, defined as
    `gpipe-plan run --record` defines it. on_step(step, loss): called on rank 0 after each step.
    optimizer_fn(groups, training): instead of torch.optim.AdamW or SGD (the plan's optimizer),
    called with this rank's parameter groups (matrices with the weight decay, the others with it
    only under decay_1d) and the model file's training settings; the learning-rate schedule still
    sets each group's "lr" before every step."""
    if runtime not in RUNTIMES:
        raise PlanError(f"runtime {runtime!r}; expected one of {', '.join(RUNTIMES)}")
    if device not in ("cpu", "cuda"):
        raise PlanError(f"device {device!r}; expected cpu or cuda")
    plan = load_plan(plan_path)
    model = load_model_file(model_path)
    binary = find_binary(binary)
    k, d, m, batch = plan["ranks"], plan["replicas"], plan["microbatches"], plan["global_batch"]
    _init_process_group(device, timeout_s)
    world, me = dist.get_world_size(), dist.get_rank()
    if world != k * d:
        raise PlanError(f"{plan['path']}: the plan runs on K x D = {k} x {d} = {k * d} processes, this job has "
                        f"{world}; start it with torchrun --nproc-per-node {k * d} -m gpipe_plan.torch ...")
    torch.set_num_threads(threads)
    dev = torch.device("cpu")
    if device == "cuda":
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(dev)
    replica, prank = next((r, p) for r in range(d) for p in range(k) if device_of(plan, r, p) == me)

    # Groups: every rank creates every group, in the same order (c10d's rule).
    pipelines = [dist.new_group([device_of(plan, r, p) for p in range(k)]) if d > 1 else None for r in range(d)]
    dp_groups = [dist.new_group(sorted(device_of(plan, r, p) for r in range(d))) if d > 1 else None
                 for p in range(k)]
    pp_group = pipelines[replica]

    layers = build_model(model, seed)
    where = os.path.basename(plan["path"])
    if len(layers) != plan["layer_count"]:
        raise PlanError(f"{where}: its profile has {plan['layer_count']} layers, the model {model['name']} has "
                        f"{len(layers)} ({', '.join(n for n, _ in layers[:8])}{', ...' if len(layers) > 8 else ''}); "
                        f"plan from a profile of this model (gpipe-plan profile --model {model['path']})")
    if init_weights:
        from safetensors.torch import load_model
        whole = torch.nn.Sequential()
        for name, layer in layers:
            whole.add_module(name, layer)
        try:
            load_model(whole, init_weights)
        except Exception as e:  # noqa: BLE001
            raise PlanError(f"init_weights {init_weights}: {type(e).__name__}: {str(e).splitlines()[0]}")
    for _, layer in layers:
        layer.to(dev)

    # Ties between ranks: summed over their holders after the backwards (our executor's
    # SumSharedGradients); counted in the norm on the lowest holder only.
    stage_of_layer = {i: st for st in plan["stages"] for i in range(st["first"], st["end"])}
    ties = []
    for p, idx in tied_parameters(layers):
        per_replica = [sorted({device_of(plan, r, stage_of_layer[i]["rank"]) for i in idx}) for r in range(d)]
        groups = [dist.new_group(h) if 1 < len(h) < world else None for h in per_replica]
        holders = per_replica[replica]
        if len(holders) > 1 and me in holders:
            ties.append((p, holders, groups[replica]))

    draw = (lambda step, size: data(step)) if callable(data) else Data(model, seed).global_batch
    replica_batch = batch // d
    micro = batch // (d * m)
    first_x, _ = draw(0, batch)
    autocast_dtype = torch.bfloat16 if plan["precision"] == "bf16" else None
    metas = _boundary_meta(layers, plan, first_x[replica * replica_batch:replica * replica_batch + micro].contiguous(),
                           dev, autocast_dtype)

    # Every rank checks every stage, so that all of them stop together.
    for st in plan["stages"][1:]:
        for x in metas[st["stage"]][0]:
            if not x.dtype.is_floating_point:
                raise PlanError(f"{where}.stages[{st['stage']}]: its input holds a {x.dtype} tensor; PyTorch's "
                                f"PipelineStage (2.11) makes every tensor a stage receives require a gradient, which "
                                f"only floating-point tensors can: cut where the boundary carries floating-point "
                                f"tensors only")

    from torch.distributed.pipelining import PipelineStage
    mine = [st for st in plan["stages"] if st["rank"] == prank]
    stages, params, seen = [], [], set()
    for st in mine:
        chain = Chain(layers[st["first"]:st["end"]], st["remat_layers"], autocast_dtype)
        ins, outs = metas[st["stage"]]
        stage = PipelineStage(chain, st["stage"], len(plan["stages"]), dev, input_args=ins, output_args=outs,
                              group=pp_group)
        _skip_self_warmup(stage)
        stages.append(stage)
        for p in chain.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                params.append(p)
    del layers

    scale = 1.0 / (m * d)
    micro_losses = []
    user_loss = loss_fn or cross_entropy

    def scaled_loss(output, target):
        loss = user_loss(output, target)
        micro_losses.append(loss.detach().double())
        return loss * scale

    training = model["training"]
    optimizer = _optimizer(plan, training, params, optimizer_fn)
    holds_first = any(st["stage"] == 0 for st in mine)
    holds_last = any(st["stage"] == len(plan["stages"]) - 1 for st in mine)
    counted = [p for p in params if all(p is not t[0] or t[1][0] == me for t in ties)]
    rank_seed = (model["seed"] if seed is None else seed)
    last = device_of(plan, 0, plan["stages"][-1]["rank"])
    losses, times, rates, norms = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="gpipe-torch-") as folder:
        schedule = _make_schedule(plan, stages, scaled_loss, runtime, binary, folder)
        for step in range(steps):
            torch.manual_seed((rank_seed * 1000003 + step * 7919 + me) & MASK64)
            micro_losses.clear()
            dist.barrier()
            t0 = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            # Drawn inside the step's time, as our executor's BeginStep draws it.
            x, y = draw(step, batch)
            # Contiguous: PipelineStage checks its input's strides against the shapes it was given.
            x = x[replica * replica_batch:(replica + 1) * replica_batch].to(dev).contiguous()
            y = y[replica * replica_batch:(replica + 1) * replica_batch].to(dev).contiguous()
            args = (x,) if holds_first else ()
            kwargs = {"target": y, "losses": []} if holds_last else {}
            schedule.step(*args, return_outputs=False, **kwargs)
            loss = sum(micro_losses, torch.zeros((), dtype=torch.float64)).item() / m if holds_last else 0.0
            for p, _, group in ties:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                dist.all_reduce(p.grad, group=group)
            if d > 1:
                for p in params:
                    if p.grad is None:
                        p.grad = torch.zeros_like(p)
                pieces = [p.grad.reshape(-1) for p in params]
                if holds_last:
                    pieces.append(torch.full((1,), loss, dtype=torch.float32, device=dev))
                flat = torch.cat(pieces)
                dist.all_reduce(flat, group=dp_groups[prank])
                offset = 0
                for p in params:
                    p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
                    offset += p.numel()
                if holds_last:
                    loss = flat[offset].item() / d
            lr = learning_rate_at(training, step)
            norm = None
            if training["clip_grad_norm"] > 0:
                norm = _global_norm(counted, replica, dev)
                coefficient = min(1.0, training["clip_grad_norm"] / (norm + 1e-6))
                for p in params:
                    if p.grad is not None:
                        p.grad.mul_(coefficient)
            for group in optimizer.param_groups:
                group["lr"] = lr
            optimizer.step()
            times.append((time.perf_counter() - t0) * 1e3)
            if norm is None:
                norm = _global_norm(counted, replica, dev)
            # After the step's time: replica 0's last stage tells every rank the step's loss.
            shared = torch.tensor([loss], dtype=torch.float64, device=dev)
            dist.broadcast(shared, src=last)
            loss = shared.item()
            losses.append(loss)
            rates.append(lr)
            norms.append(norm)
            if on_step is not None and me == 0:
                on_step(step, loss)
    # A step's time is the slowest rank's, as in our executor's record.
    step_ms = torch.tensor(times, dtype=torch.float64, device=dev)
    dist.all_reduce(step_ms, op=dist.ReduceOp.MAX)
    times = step_ms.tolist()
    if me == 0 and record:
        later = times[1:] or times
        out = {"format": "gpipe-torch-run/1", "runner": "torch.distributed.pipelining " + runtime,
               "torch": torch.__version__, "plan": plan["path"], "model": model["path"],
               "schedule": plan["schedule"], "global_batch": batch, "microbatches": m, "num_ranks": k,
               "replicas": d, "threads_per_rank": threads, "device": device,
               "steps": [{"step": i, "loss": losses[i], "time_ms": times[i], "learning_rate": rates[i],
                          "grad_norm": norms[i]} for i in range(steps)],
               "throughput_samples_per_s": batch / (statistics.median(later) / 1e3)}
        with open(record, "w") as f:
            json.dump(out, f, indent=1)
    return losses


def _global_norm(counted, replica, dev):
    total = torch.zeros(1, dtype=torch.float64, device=dev)
    if replica == 0:
        for p in counted:
            if p.grad is not None:
                total += p.grad.detach().double().pow(2).sum()
    if dist.get_world_size() > 1:
        dist.all_reduce(total)
    return math.sqrt(total.item())


# ------------------------------------------------------------------------------------------------
# Command line
# ------------------------------------------------------------------------------------------------

def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(
        prog="python -m gpipe_plan.torch",
        description="Train a gpipe-plan/1 plan in PyTorch's pipeline runtime (torch.distributed.pipelining). "
                    "Run it under torchrun with K x D processes, e.g. torchrun --nproc-per-node 2 -m "
                    "gpipe_plan.torch plan.json --model models/examples/gpt2.json --steps 5")
    ap.add_argument("plan", help="a gpipe-plan/1 file (gpipe-plan plan -o)")
    ap.add_argument("--model", required=True, help="the gpipe-model/1 file naming \"python\": \"file.py:build\"")
    ap.add_argument("--steps", type=int, default=10, help="training steps (default 10)")
    ap.add_argument("--seed", type=int, default=None, help="instead of the model file's seed")
    ap.add_argument("--runtime", choices=RUNTIMES, default="csv",
                    help="csv: the exported order through _PipelineScheduleRuntime (default); csv-comms: with our "
                         "sends and receives; class: PyTorch's schedule class")
    ap.add_argument("--binary", default=None, help="the gpipe-plan binary (default $GPIPE_PLAN, then PATH)")
    ap.add_argument("--init-weights", default=None, help="start from this safetensors file")
    ap.add_argument("--threads-per-rank", type=int, default=1, help="intra-op threads per rank (default 1)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--timeout", type=float, default=120, help="seconds a rank waits for another (default 120)")
    ap.add_argument("--record", default=None, help="write the steps' losses and times here (JSON, rank 0)")
    args = ap.parse_args(argv)
    if args.steps < 1:
        ap.error("--steps must be at least 1")
    started = time.perf_counter()

    def progress(step, loss):
        print(f"step {step + 1}/{args.steps}  loss {loss:.4f}", flush=True)

    try:
        losses = train(args.plan, args.model, steps=args.steps, seed=args.seed, binary=args.binary,
                       runtime=args.runtime, init_weights=args.init_weights, threads=args.threads_per_rank,
                       device=args.device, timeout_s=args.timeout, record=args.record, on_step=progress)
    except PlanError as e:
        print(f"gpipe_plan.torch: {e}", file=sys.stderr, flush=True)
        return 1
    if dist.get_rank() == 0:
        print(f"{len(losses)} steps in PyTorch's runtime ({args.runtime}), loss {losses[0]:.4f} -> {losses[-1]:.4f}, "
              f"{time.perf_counter() - started:.1f} s" + (f"; record written to {args.record}" if args.record else ""),
              flush=True)
    dist.barrier()  # no rank tears its links down while another still reads from them
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    # Without the interpreter's teardown: under load, Gloo's threads met at exit once aborted a
    # finished job ("terminate called without an active exception") after its record was written.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
