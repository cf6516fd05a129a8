#!/usr/bin/env python3
"""Training throughput of the tiny GPT: gpipe-plan's executor against one process, and against
PyTorch's own pipelining (torch.distributed.pipelining), measured in one run on this machine.

 (a) gpipe-plan, K=2 pipeline ranks with one thread each, against gpipe-plan with K=1, M=1 (one
     process, one thread) on the same global batch, for M in {1,2,4,8}; next to GPipe's ideal
     speed-up K*M/(M+K-1) and the ratio measured/ideal.
 (b) the same model, global batch and layer cut with PyTorch's ScheduleGPipe and Schedule1F1B
     (two processes, Gloo on loopback, torch.set_num_threads(1) in each), and a plain
     single-process PyTorch loop as PyTorch's own K=1 baseline; the ratio gpipe-plan/PyTorch.
     Also measured, to read the others by: that loop accumulating over the same M micro-batches
     (what small micro-batches cost without any pipeline), and two copies of it at once (the
     machine's ceiling for any 2-rank speed-up).

Throughput of one configuration = global_batch / mean(step time) over the steps after the first
(warm-up); each configuration runs --repeats times, interleaved with the others, and the best
repeat is reported, because timings on a small shared machine vary by tens of percent.

Usage:
  python3 bench/pipeline_vs_torch.py                      # everything
  python3 bench/pipeline_vs_torch.py --quick              # M in {1,8}, 1 repeat, 3 steps
  python3 bench/pipeline_vs_torch.py --torch-only --quick # PyTorch side only, no binary needed
  python3 bench/pipeline_vs_torch.py --json out.json      # also write every figure as JSON

Only the standard library and torch are used; torch is imported only by the worker processes.
"""

import argparse
import json
import multiprocessing as mp
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
K = 2  # pipeline ranks compared against one process


class BenchError(Exception):
    pass


# --------------------------------------------------------------------------------------------
# Model description (models/tiny-gpt.json, format gpipe-model/1)
# --------------------------------------------------------------------------------------------

def load_model_spec(path):
    try:
        with open(path) as f:
            spec = json.load(f)
    except (OSError, ValueError) as e:
        raise BenchError(f"cannot read the model file {path}: {e}")
    if spec.get("format") != "gpipe-model/1":
        raise BenchError(f"{path}: format should be gpipe-model/1, is {spec.get('format')!r}")
    layers = spec.get("layers")
    if not isinstance(layers, list) or not layers:
        raise BenchError(f"{path}: no layers")
    known = {"embedding", "transformer-block", "lm-head"}
    for i, layer in enumerate(layers):
        if layer.get("type") not in known:
            raise BenchError(f"{path}: layers[{i}].type {layer.get('type')!r} is not one of {sorted(known)}")
        if float(layer.get("dropout", 0.0)) != 0.0:
            raise BenchError(f"{path}: layers[{i}].dropout must be 0 for this benchmark")
    if layers[0]["type"] != "embedding" or layers[-1]["type"] != "lm-head":
        raise BenchError(f"{path}: the first layer must be an embedding and the last an lm-head")
    inp = spec.get("input", {})
    if inp.get("kind") != "tokens":
        raise BenchError(f"{path}: input.kind must be tokens")
    return spec


def profile_cut(profile_path):
    """The two-stage cut that balances the profile's forward+backward time (used only where no plan
    is available, i.e. --torch-only without a working binary)."""
    with open(profile_path) as f:
        prof = json.load(f)
    t = [float(l["forward_ms"]) + float(l["backward_ms"]) for l in prof["layers"]]
    best = min(range(1, len(t)), key=lambda c: (max(sum(t[:c]), sum(t[c:])), c))
    return best, prof


# --------------------------------------------------------------------------------------------
# The PyTorch side (runs only inside the worker processes)
# --------------------------------------------------------------------------------------------

def build_layers(spec):
    """The model's layers as torch modules, in order (one module per layer of the JSON)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Embedding(nn.Module):
        def __init__(self, vocab, dim, max_seq):
            super().__init__()
            self.tok = nn.Embedding(vocab, dim)
            self.pos = nn.Embedding(max_seq, dim)

        def forward(self, ids):
            s = ids.shape[1]
            pos = torch.arange(s, device=ids.device)
            return self.tok(ids) + self.pos(pos)

    class Block(nn.Module):
        def __init__(self, dim, heads, mlp_ratio):
            super().__init__()
            self.heads = heads
            self.ln1 = nn.LayerNorm(dim)
            self.qkv = nn.Linear(dim, 3 * dim)
            self.proj = nn.Linear(dim, dim)
            self.ln2 = nn.LayerNorm(dim)
            self.fc1 = nn.Linear(dim, mlp_ratio * dim)
            self.fc2 = nn.Linear(mlp_ratio * dim, dim)

        def forward(self, x):
            b, s, d = x.shape
            h = self.heads
            qkv = self.qkv(self.ln1(x)).view(b, s, 3, h, d // h).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class Head(nn.Module):
        def __init__(self, dim, vocab, bias):
            super().__init__()
            self.ln = nn.LayerNorm(dim)
            self.out = nn.Linear(dim, vocab, bias=bias)

        def forward(self, x):
            return self.out(self.ln(x))

    mods = []
    for layer in spec["layers"]:
        t = layer["type"]
        if t == "embedding":
            mods.append(Embedding(int(layer["vocab"]), int(layer["dim"]), int(layer["max_seq"])))
        elif t == "transformer-block":
            mods.append(Block(int(layer["dim"]), int(layer["heads"]), int(layer.get("mlp_ratio", 4))))
        else:
            # No bias on the LM head unless the model file asks for one: GPT-2's convention, and
            # what profiles/generate.py counts (param_bytes = 4 * (2*dim + dim*vocab)).
            mods.append(Head(int(layer["dim"]), int(layer["vocab"]), bool(layer.get("bias", False))))
    return mods


def _loss_fn(logits, target):
    import torch.nn.functional as F
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def _batches(spec, global_batch, steps, seed):
    import torch
    g = torch.Generator().manual_seed(seed)
    vocab = int(spec["input"]["vocab"])
    seq = int(spec["input"]["seq_len"])
    out = []
    for _ in range(steps):
        ids = torch.randint(0, vocab, (global_batch, seq + 1), generator=g)
        out.append((ids[:, :-1].contiguous(), ids[:, 1:].contiguous()))
    return out


def _run_single(spec, global_batch, steps, m=1):
    """Plain PyTorch training, one process, one thread, no pipeline (PyTorch's K=1 baseline); with
    m > 1 it accumulates gradients over m micro-batches, i.e. the pipeline's work without the
    pipeline, which shows what the smaller micro-batches alone cost."""
    import torch
    torch.manual_seed(int(spec.get("seed", 1234)))
    model = torch.nn.Sequential(*build_layers(spec))
    opt = torch.optim.Adam(model.parameters(), lr=float(spec.get("training", {}).get("learning_rate", spec.get("learning_rate", 1e-3))))
    times, losses = [], []
    for x, y in _batches(spec, global_batch, steps, seed=7):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for xm, ym in zip(x.chunk(m), y.chunk(m)):
            loss = _loss_fn(model(xm), ym) / m
            loss.backward()
            total += loss.item()
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(total)
    return {"step_s": times, "loss": losses}


def _run_pipeline(rank, spec, cut, schedule_name, m, global_batch, steps):
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    torch.manual_seed(int(spec.get("seed", 1234)))
    layers = build_layers(spec)  # every rank builds all layers, so the weights match a K=1 run
    first, end = (0, cut) if rank == 0 else (cut, len(layers))
    stage_mod = torch.nn.Sequential(*layers[first:end])
    del layers
    # Shapes are given explicitly (on the meta device): PyTorch's runtime shape inference sends
    # them with send_object_list, which needs NumPy, and it is not a dependency here.
    mb = global_batch // m
    seq = int(spec["input"]["seq_len"])
    widths = [int(l["dim"]) for l in spec["layers"][:-1]] + [int(spec["layers"][-1]["vocab"])]
    meta = torch.device("meta")
    if first == 0:
        in_meta = torch.empty(mb, seq, dtype=torch.long, device=meta)
    else:
        in_meta = torch.empty(mb, seq, widths[first - 1], device=meta)
    out_meta = torch.empty(mb, seq, widths[end - 1], device=meta)
    stage = PipelineStage(stage_mod, stage_index=rank, num_stages=K, device=torch.device("cpu"),
                          input_args=in_meta, output_args=out_meta)
    cls = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule_name]
    sched = cls(stage, n_microbatches=m, loss_fn=_loss_fn)
    opt = torch.optim.Adam(stage_mod.parameters(), lr=float(spec.get("training", {}).get("learning_rate", spec.get("learning_rate", 1e-3))))
    times, losses = [], []
    for x, y in _batches(spec, global_batch, steps, seed=7):
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if rank == 0:
            sched.step(x)
        else:
            mb_losses = []
            sched.step(target=y, losses=mb_losses)
        opt.step()
        times.append(time.perf_counter() - t0)
        if rank == K - 1:
            losses.append(sum(l.item() for l in mb_losses) / len(mb_losses))
    # Step time = the slower rank's; one collective after the timed loop.
    tt = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(tt, op=dist.ReduceOp.MAX)
    return {"step_s": tt.tolist(), "loss": losses}


def _quiet_torch_import():
    import warnings
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")  # NumPy is not needed


def _worker(rank, port, conn):
    """One pipeline rank: joins the Gloo group once, then runs the configurations it is sent."""
    _quiet_torch_import()
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"
    if os.path.exists("/sys/class/net/lo"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # keep Gloo's pairs on loopback
    try:
        import torch
        import torch.distributed as dist
        torch.set_num_threads(1)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:
            pass
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=K)
        conn.send({"ok": True, "threads": torch.get_num_threads(),
                   "interop_threads": torch.get_num_interop_threads(),
                   "gloo_ifname": os.environ.get("GLOO_SOCKET_IFNAME"),
                   # plain str: torch's own str subclasses would import torch in the driver
                   "backend": str(dist.get_backend()), "world": dist.get_world_size(),
                   "torch": str(torch.__version__)})
    except Exception:
        conn.send({"ok": False, "error": traceback.format_exc()})
        return
    while True:
        msg = conn.recv()
        if msg["cmd"] == "quit":
            break
        try:
            if msg["cmd"] == "single":
                res = _run_single(msg["spec"], msg["global_batch"], msg["steps"], msg.get("m", 1))
            else:
                res = _run_pipeline(rank, msg["spec"], msg["cut"], msg["schedule"], msg["m"],
                                    msg["global_batch"], msg["steps"])
            conn.send({"ok": True, **res})
        except Exception as e:
            conn.send({"ok": False, "error": f"{type(e).__name__}: {e}",
                       "value_error": isinstance(e, ValueError),
                       "trace": traceback.format_exc()})
            if msg["cmd"] != "single" and not isinstance(e, ValueError):
                break  # a failure inside a collective leaves the group unusable
    try:
        dist.destroy_process_group()
    except Exception:
        pass


def layer_param_bytes(spec):
    import torch
    torch.manual_seed(0)
    return [4 * sum(p.numel() for p in mod.parameters()) for mod in build_layers(spec)]


def _check_params(spec, conn=None):
    """Run in a spawned process: the torch model's parameter bytes per layer."""
    _quiet_torch_import()
    os.environ["OMP_NUM_THREADS"] = "1"
    conn.send(layer_param_bytes(spec))


class TorchPipeline:
    """Two persistent worker processes (ranks 0 and 1) in one Gloo group on loopback."""

    def __init__(self):
        ctx = mp.get_context("spawn")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.conns, self.procs = [], []
        for r in range(K):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_worker, args=(r, port, child), daemon=True)
            p.start()
            self.conns.append(parent)
            self.procs.append(p)
        self.info = [self._recv(c, 120) for c in self.conns]
        for r, i in enumerate(self.info):
            if not i["ok"]:
                raise BenchError(f"PyTorch rank {r} failed to start:\n{i['error']}")
            if i["backend"] != "gloo" or i["world"] != K or i["threads"] != 1:
                raise BenchError(f"PyTorch rank {r}: backend {i['backend']}, world {i['world']}, "
                                 f"{i['threads']} threads; expected gloo, {K}, 1")

    def _recv(self, conn, timeout):
        if not conn.poll(timeout):
            raise BenchError(f"a PyTorch worker did not answer within {timeout} s")
        return conn.recv()

    def single(self, spec, global_batch, steps, m=1):
        self.conns[0].send({"cmd": "single", "spec": spec, "global_batch": global_batch,
                            "steps": steps, "m": m})
        return self._recv(self.conns[0], 900)

    def single_on_both(self, spec, global_batch, steps):
        """The K=1 loop on both ranks at once, independently: how much two single-thread
        processes slow each other down on this machine (the ceiling for any 2-rank speed-up)."""
        msg = {"cmd": "single", "spec": spec, "global_batch": global_batch, "steps": steps}
        for c in self.conns:
            c.send(msg)
        res = [self._recv(c, 900) for c in self.conns]
        bad = [x for x in res if not x["ok"]]
        if bad:
            return bad[0]
        return {"ok": True, "per_rank_step_s": [x["step_s"] for x in res],
                "samples_per_s": sum(throughput(x["step_s"], global_batch) for x in res)}

    def pipeline(self, spec, cut, schedule, m, global_batch, steps):
        msg = {"cmd": "pipe", "spec": spec, "cut": cut, "schedule": schedule, "m": m,
               "global_batch": global_batch, "steps": steps}
        for c in self.conns:
            c.send(msg)
        res = [self._recv(c, 900) for c in self.conns]
        bad = [(r, x) for r, x in enumerate(res) if not x["ok"]]
        if bad:
            # Report every failing rank: the first cause is often on the other rank.
            errs = {x["error"] for _, x in bad}
            return {"ok": False,
                    "error": (f"all ranks: {errs.pop()}" if len(errs) == 1 and len(bad) == K else
                              "; ".join(f"rank {r}: {x['error']}" for r, x in bad)),
                    "value_error": all(x.get("value_error") for _, x in bad),
                    "trace": "\n".join(f"rank {r}:\n{x.get('trace', '')}" for r, x in bad)}
        return {"ok": True, "step_s": res[0]["step_s"], "loss": res[K - 1]["loss"]}

    def close(self):
        for c in self.conns:
            try:
                c.send({"cmd": "quit"})
            except (OSError, BrokenPipeError):
                pass
        for p in self.procs:
            p.join(10)
            if p.is_alive():
                p.terminate()


# --------------------------------------------------------------------------------------------
# The gpipe-plan side
# --------------------------------------------------------------------------------------------

def run_cmd(cmd, what, timeout):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError as e:
        raise BenchError(f"{what}: cannot start {cmd[0]}: {e}")
    except subprocess.TimeoutExpired:
        raise BenchError(f"{what}: timed out after {timeout} s: {' '.join(cmd)}")
    if r.returncode != 0:
        raise BenchError(f"{what} failed (exit {r.returncode}):\n  {' '.join(cmd)}\n"
                         f"stderr:\n{r.stderr.strip()}\nstdout:\n{r.stdout.strip()[-2000:]}")
    return r


def plan_stages(plan_path):
    """[(first, end, rank), ...] from a gpipe-plan/1 file; accepts both `layers: [first, end]` and
    `first_layer`/`end_layer`."""
    with open(plan_path) as f:
        plan = json.load(f)
    out = []
    for i, st in enumerate(plan.get("stages", [])):
        if "layers" in st:
            first, end = st["layers"]
        elif "first_layer" in st and "end_layer" in st:
            first, end = st["first_layer"], st["end_layer"]
        else:
            raise BenchError(f"{plan_path}: stages[{i}] has neither layers nor first_layer/end_layer")
        out.append((int(first), int(end), int(st.get("rank", i))))
    return plan, out


def make_plan(args, tmp, k, m, schedule):
    path = os.path.join(tmp, f"plan-k{k}-m{m}-{schedule}.json")
    cmd = [args.binary, "plan", "--profile", args.profile, "--cluster", args.cluster,
           "--global-batch", str(args.global_batch), "--stages", str(k), "--microbatches", str(m),
           "--schedule", schedule, "--remat", "off", "--replicas", "1", "-o", path]
    run_cmd(cmd, f"gpipe-plan plan (K={k}, M={m}, {schedule})", 300)
    plan, stages = plan_stages(path)
    if len(stages) != k or sorted(r for _, _, r in stages) != list(range(k)):
        raise BenchError(f"the plan for K={k} M={m} has stages {stages}, expected {k} stages on ranks 0..{k-1}")
    if int(plan.get("microbatches", m)) != m:
        raise BenchError(f"the plan for K={k} M={m} has microbatches={plan.get('microbatches')}")
    return path, stages


def run_gpipe_plan(args, tmp, plan_path, tag, rep):
    rec = os.path.join(tmp, f"record-{tag}-r{rep}.json")
    cmd = [args.binary, "run", plan_path, "--model", args.model, "--steps", str(args.steps),
           "--threads-per-rank", "1", "--record", rec]
    run_cmd(cmd, f"gpipe-plan run ({tag})", 900)
    try:
        with open(rec) as f:
            record = json.load(f)
    except (OSError, ValueError) as e:
        raise BenchError(f"gpipe-plan run ({tag}): cannot read the record {rec}: {e}")
    steps = record.get("steps", [])
    if len(steps) != args.steps:
        raise BenchError(f"gpipe-plan run ({tag}): the record has {len(steps)} steps, expected {args.steps}")
    step_s = [float(s["time_ms"]) / 1000.0 for s in steps]
    return {"ok": True, "step_s": step_s, "loss": [s.get("loss") for s in steps],
            "record_throughput_samples_per_s": record.get("throughput_samples_per_s"),
            "peak_memory_bytes": [r.get("peak_memory_bytes") for r in record.get("ranks", [])]}


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------

def throughput(step_s, global_batch):
    timed = step_s[1:]  # step 0 is the warm-up
    return global_batch / (sum(timed) / len(timed))


def fmt(x, spec="{:.1f}"):
    return "n/a" if x is None else spec.format(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(REPO, "build", "gpipe-plan"))
    ap.add_argument("--model", default=os.path.join(REPO, "models", "tiny-gpt.json"))
    ap.add_argument("--profile", default=os.path.join(REPO, "profiles", "tiny-gpt-cpu.json"))
    ap.add_argument("--cluster", default=os.path.join(REPO, "profiles", "clusters", "cpu-2.json"))
    ap.add_argument("--steps", type=int, default=None, help="steps per run, the first is warm-up (default 6)")
    ap.add_argument("--repeats", type=int, default=None, help="best of this many interleaved repeats (default 3)")
    # 128: at M=8 a micro-batch of 16 still keeps one thread busy; at 32 (micro-batches of 4) a
    # single process loses a quarter of its speed to the small micro-batches alone (column K=1 xM).
    ap.add_argument("--global-batch", type=int, default=128)
    ap.add_argument("--microbatches", default=None, help="comma-separated M values (default 1,2,4,8)")
    ap.add_argument("--quick", action="store_true", help="M in {1,8}, 1 repeat, 3 steps")
    ap.add_argument("--torch-only", action="store_true", help="only the PyTorch side; no gpipe-plan binary needed")
    ap.add_argument("--cut", type=int, default=None,
                    help="with --torch-only: first layer of stage 1 (default: from a gpipe-plan plan if the "
                         "binary works, else the profile's balanced cut)")
    ap.add_argument("--json", metavar="OUT", help="write every figure to this JSON file")
    args = ap.parse_args()

    if args.steps is None:
        args.steps = 3 if args.quick else 6
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    ms = [int(x) for x in args.microbatches.split(",")] if args.microbatches else ([1, 8] if args.quick else [1, 2, 4, 8])
    if args.steps < 2:
        ap.error("--steps must be at least 2 (the first step is warm-up)")
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    for m in ms:
        if m < 1 or args.global_batch % m:
            ap.error(f"--global-batch {args.global_batch} does not split into {m} micro-batches")
    for a in ("model", "profile", "cluster"):
        setattr(args, a, os.path.abspath(getattr(args, a)))
    args.binary = os.path.abspath(args.binary)

    spec = load_model_spec(args.model)
    n_layers = len(spec["layers"])
    with_gp = not args.torch_only
    if with_gp and not (os.path.isfile(args.binary) and os.access(args.binary, os.X_OK)):
        raise BenchError(f"no gpipe-plan binary at {args.binary} (build it with -DGPIPE_WITH_TORCH=ON, "
                         f"pass --binary, or use --torch-only)")

    tmp = tempfile.mkdtemp(prefix="gpipe-bench-")
    torch_pipe = None
    try:
        # ---- plans (and the layer cut both sides use) ----
        plans = {}
        cuts = {}
        cut_source = None
        if with_gp:
            plans["k1"], st = make_plan(args, tmp, 1, 1, "gpipe")
            for m in ms:
                path, st = make_plan(args, tmp, K, m, "gpipe")
                plans[m] = path
                cuts[m] = st[1][0]
            cut_source = "gpipe-plan plan"
        else:
            cut_source = "--cut"
            if args.cut is not None:
                cuts = {m: args.cut for m in ms}
            elif os.path.isfile(args.binary) and os.access(args.binary, os.X_OK):
                try:
                    for m in ms:
                        cuts[m] = make_plan(args, tmp, K, m, "gpipe")[1][1][0]
                    cut_source = "gpipe-plan plan"
                except BenchError as e:
                    cuts = {}
                    print(f"note: could not take the cut from a plan ({str(e).splitlines()[0]})", file=sys.stderr)
            if not cuts:
                c, _ = profile_cut(args.profile)
                cuts = {m: c for m in ms}
                cut_source = f"balanced split of {os.path.relpath(args.profile, REPO)}"
        for m, c in cuts.items():
            if not 0 < c < n_layers:
                raise BenchError(f"cut {c} for M={m} is not inside the model's {n_layers} layers")

        # ---- sanity: the torch layers hold the parameter bytes the profile says ----
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        p = ctx.Process(target=_check_params, args=(spec,), kwargs={"conn": child})
        p.start()
        torch_param_bytes = parent.recv()
        p.join()
        with open(args.profile) as f:
            prof_layers = json.load(f)["layers"]
        prof_param_bytes = [int(l["param_bytes"]) for l in prof_layers]
        params_match = torch_param_bytes == prof_param_bytes

        torch_pipe = TorchPipeline()
        info = torch_pipe.info

        # ---- configurations, interleaved over the repeats ----
        configs = []  # (key, description)
        if with_gp:
            configs.append(("gp-k1", None))
            configs += [(f"gp-k2-m{m}", m) for m in ms]
        configs.append(("torch-k1", None))
        configs.append(("torch-k1-x2", None))
        configs += [(f"torch-k1-m{m}", m) for m in ms if m > 1]
        for m in ms:
            configs.append((f"torch-gpipe-m{m}", m))
            configs.append((f"torch-1f1b-m{m}", m))

        results = {key: [] for key, _ in configs}
        failures = {}
        t_start = time.time()
        for rep in range(args.repeats):
            order = configs if rep % 2 == 0 else list(reversed(configs))
            for key, m in order:
                if key in failures:
                    continue
                print(f"[{time.time() - t_start:6.1f}s] repeat {rep + 1}/{args.repeats}: {key}",
                      file=sys.stderr, flush=True)
                if key == "gp-k1":
                    res = run_gpipe_plan(args, tmp, plans["k1"], key, rep)
                elif key.startswith("gp-k2"):
                    res = run_gpipe_plan(args, tmp, plans[m], key, rep)
                elif key == "torch-k1":
                    res = torch_pipe.single(spec, args.global_batch, args.steps)
                elif key.startswith("torch-k1-m"):
                    res = torch_pipe.single(spec, args.global_batch, args.steps, m)
                elif key == "torch-k1-x2":
                    res = torch_pipe.single_on_both(spec, args.global_batch, args.steps)
                else:
                    sched = key.split("-")[1]
                    res = torch_pipe.pipeline(spec, cuts[m], sched, m, args.global_batch, args.steps)
                if not res["ok"]:
                    failures[key] = res["error"]
                    print(f"    {key} failed: {res['error']}", file=sys.stderr)
                    if not res.get("value_error"):
                        raise BenchError(f"PyTorch run {key} failed:\n{res['trace']}")
                    continue
                if "samples_per_s" not in res:
                    res["samples_per_s"] = throughput(res["step_s"], args.global_batch)
                results[key].append(res)
        elapsed = time.time() - t_start

        def best(key):
            runs = results.get(key) or []
            return max(r["samples_per_s"] for r in runs) if runs else None

        # ---- table ----
        gp_k1 = best("gp-k1") if with_gp else None
        t_k1 = best("torch-k1")
        t_x2 = best("torch-k1-x2")
        ceiling = t_x2 / t_k1 if t_x2 and t_k1 else None
        rows = []
        for m in ms:
            ideal = K * m / (m + K - 1)
            gp = best(f"gp-k2-m{m}") if with_gp else None
            tg = best(f"torch-gpipe-m{m}")
            tf = best(f"torch-1f1b-m{m}")
            ta = t_k1 if m == 1 else best(f"torch-k1-m{m}")
            row = {
                "microbatches": m, "cut": cuts[m], "ideal_speedup": ideal,
                "gpipe_plan_samples_per_s": gp,
                "gpipe_plan_speedup": gp / gp_k1 if gp and gp_k1 else None,
                "torch_k1_accumulating_samples_per_s": ta,
                "torch_k1_accumulating_relative": ta / t_k1 if ta and t_k1 else None,
                "torch_gpipe_samples_per_s": tg,
                "torch_gpipe_speedup": tg / t_k1 if tg and t_k1 else None,
                "torch_1f1b_samples_per_s": tf,
                "torch_1f1b_speedup": tf / t_k1 if tf and t_k1 else None,
                "torch_1f1b_error": failures.get(f"torch-1f1b-m{m}"),
                "torch_gpipe_error": failures.get(f"torch-gpipe-m{m}"),
            }
            row["gpipe_plan_measured_over_ideal"] = row["gpipe_plan_speedup"] / ideal if row["gpipe_plan_speedup"] else None
            row["torch_gpipe_measured_over_ideal"] = row["torch_gpipe_speedup"] / ideal if row["torch_gpipe_speedup"] else None
            row["torch_1f1b_measured_over_ideal"] = row["torch_1f1b_speedup"] / ideal if row["torch_1f1b_speedup"] else None
            row["gpipe_plan_over_torch_gpipe"] = gp / tg if gp and tg else None
            row["gpipe_plan_over_torch_1f1b"] = gp / tf if gp and tf else None
            rows.append(row)

        print()
        print(f"tiny GPT ({os.path.relpath(args.model, REPO)}): global batch {args.global_batch}, "
              f"{args.steps - 1} timed steps after 1 warm-up, best of {args.repeats} interleaved repeat(s); "
              f"K={K} ranks x 1 thread, stage 1 starts at layer `cut` ({cut_source}); "
              f"PyTorch {info[0]['torch']}, {info[0]['backend']} on 127.0.0.1 (interface {info[0]['gloo_ifname']}), "
              f"{K} processes with {'/'.join(str(i['threads']) for i in info)} intra-op thread(s); "
              f"{os.cpu_count()} CPUs; measured in {elapsed:.0f} s")
        print(f"K=1, M=1 baseline (samples/s): gpipe-plan {fmt(gp_k1)}, "
              f"PyTorch single process {fmt(t_k1)}")
        print(f"machine ceiling: two independent PyTorch K=1 processes at once reach {fmt(t_x2)} samples/s "
              f"together, {fmt(ceiling, '{:.2f}')}x one alone (no pipeline can beat this on this machine)")
        if not params_match:
            print(f"WARNING: torch parameter bytes per layer {torch_param_bytes} differ from the "
                  f"profile's {prof_param_bytes}")
        hdr = ["M", "cut", "K=1 xM", "ideal", "gpipe-plan", "speedup", "meas/ideal", "torch GPipe", "speedup",
               "meas/ideal", "torch 1F1B", "speedup", "meas/ideal", "gp/GPipe", "gp/1F1B"]
        table = []
        for r in rows:
            table.append([str(r["microbatches"]), str(r["cut"]), fmt(r["torch_k1_accumulating_relative"], "{:.2f}"),
                          fmt(r["ideal_speedup"], "{:.2f}"),
                          fmt(r["gpipe_plan_samples_per_s"]), fmt(r["gpipe_plan_speedup"], "{:.2f}"),
                          fmt(r["gpipe_plan_measured_over_ideal"], "{:.2f}"),
                          fmt(r["torch_gpipe_samples_per_s"]), fmt(r["torch_gpipe_speedup"], "{:.2f}"),
                          fmt(r["torch_gpipe_measured_over_ideal"], "{:.2f}"),
                          fmt(r["torch_1f1b_samples_per_s"]), fmt(r["torch_1f1b_speedup"], "{:.2f}"),
                          fmt(r["torch_1f1b_measured_over_ideal"], "{:.2f}"),
                          fmt(r["gpipe_plan_over_torch_gpipe"], "{:.2f}"),
                          fmt(r["gpipe_plan_over_torch_1f1b"], "{:.2f}")])
        widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(hdr)]
        print("  ".join(h.rjust(w) for h, w in zip(hdr, widths)))
        for t in table:
            print("  ".join(c.rjust(w) for c, w in zip(t, widths)))
        print("samples/s; speedup = over the same tool's K=1, M=1 run; ideal = K*M/(M+K-1); "
              "gp/X = gpipe-plan samples/s over PyTorch's;\n"
              "K=1 xM = PyTorch in one process accumulating over the same M micro-batches, relative to "
              "M=1 (what the smaller micro-batches alone cost, with no pipeline)")
        for m in ms:
            err = failures.get(f"torch-1f1b-m{m}")
            if err:
                print(f"torch 1F1B, M={m}: not run: {err}")
            err = failures.get(f"torch-gpipe-m{m}")
            if err:
                print(f"torch GPipe, M={m}: not run: {err}")

        if args.json:
            out = {
                "format": "gpipe-bench-pipeline-vs-torch/1",
                "model": args.model, "profile": args.profile, "cluster": args.cluster,
                "binary": args.binary if with_gp else None,
                "global_batch": args.global_batch, "steps": args.steps, "warmup_steps": 1,
                "repeats": args.repeats, "ranks": K, "threads_per_rank": 1,
                "microbatches": ms, "cut_source": cut_source,
                "cuts": {str(m): c for m, c in cuts.items()},
                "torch_version": info[0]["torch"], "torch_backend": info[0]["backend"],
                "torch_threads_per_process": [i["threads"] for i in info],
                "torch_interop_threads_per_process": [i["interop_threads"] for i in info],
                "gloo_socket_ifname": info[0]["gloo_ifname"],
                "cpu_count": os.cpu_count(), "elapsed_s": elapsed,
                "param_bytes_torch": torch_param_bytes, "param_bytes_profile": prof_param_bytes,
                "baseline_k1_samples_per_s": {"gpipe_plan": gp_k1, "torch": t_k1},
                "two_concurrent_torch_k1_samples_per_s": t_x2,
                "parallel_ceiling": ceiling,
                "rows": rows,
                "runs": {key: [{k2: v for k2, v in r.items() if k2 != "ok"} for r in runs]
                         for key, runs in results.items()},
                "failures": failures,
            }
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)
                f.write("\n")
            print(f"wrote {args.json}")
    finally:
        if torch_pipe is not None:
            torch_pipe.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    try:
        main()
    except BenchError as e:
        print(f"pipeline_vs_torch: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
