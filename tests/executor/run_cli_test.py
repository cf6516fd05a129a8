#!/usr/bin/env python3
"""End-to-end tests of `gpipe-plan run` over real processes and Gloo on loopback.

Usage: run_cli_test.py BINARY CASE   (CASE: one of the functions named in CASES below)
Each case makes its own plans with `gpipe-plan plan`, runs them, and asserts on the run records.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

SOURCE = os.environ.get("GPIPE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL = os.path.join(SOURCE, "models", "tiny-gpt.json")
PROFILE = os.path.join(SOURCE, "profiles", "tiny-gpt-cpu.json")
CLUSTER = os.path.join(SOURCE, "profiles", "clusters", "cpu-2.json")


def sh(args, check=True, **kw):
    result = subprocess.run(args, capture_output=True, text=True, **kw)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}")
    return result


def plan(binary, tmp, name, stages=2, microbatches=4, schedule="1f1b", remat="off", batch=16):
    path = os.path.join(tmp, name + ".json")
    sh([binary, "plan", "--profile", PROFILE, "--cluster", CLUSTER, "--global-batch", str(batch),
        "--stages", str(stages), "--microbatches", str(microbatches), "--schedule", schedule,
        "--remat", remat, "--replicas", "1", "-o", path])
    return path


def record(path):
    with open(path) as f:
        return json.load(f)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def losses(rec):
    return [s["loss"] for s in rec["steps"]]


def two_ranks_record(binary, tmp):
    """Two processes over Gloo: the record has what the issue asks for, and the same losses as
    the in-process wire (whose parameters the equivalence tests check against one process)."""
    p = plan(binary, tmp, "p")
    out = os.path.join(tmp, "run.json")
    trace = os.path.join(tmp, "trace.json")
    result = sh([binary, "run", p, "--model", MODEL, "--steps", "3", "--record", out, "--trace", trace])
    assert "step 3/3" in result.stdout, result.stdout
    rec = record(out)
    assert rec["format"] == "gpipe-run/1" and rec["backend"] == "gloo"
    assert len(rec["steps"]) == 3 and all(s["time_ms"] > 0 for s in rec["steps"])
    assert rec["throughput_samples_per_s"] > 0
    assert [r["rank"] for r in rec["ranks"]] == [0, 1]
    for r in rec["ranks"]:
        assert r["peak_memory_bytes"] > r["parameter_bytes"] > 0, r
        computes = [a for a in r["actions"] if a["step"] == 2 and a["action"][1] in "FB"]
        assert len(computes) == 8, computes  # 4 forwards + 4 backwards per rank
    with open(trace) as f:
        events = json.load(f)["traceEvents"]
    assert any(e.get("name") == "1B3" for e in events)
    local = os.path.join(tmp, "local.json")
    sh([binary, "run", p, "--model", MODEL, "--steps", "3", "--record", local, "--in-process"])
    for a, b in zip(losses(rec), losses(record(local))):
        assert abs(a - b) <= 1e-5 * max(1.0, abs(a)), (losses(rec), losses(record(local)))


def replicas_over_gloo(binary, tmp):
    """D=2 replicas of a 1-stage pipeline sum gradients over a Gloo sub-group: the losses equal the
    in-process run's (whose parameters the equivalence tests check against one process)."""
    p = os.path.join(tmp, "p.json")
    sh([binary, "plan", "--profile", PROFILE, "--cluster", CLUSTER, "--global-batch", "16", "--stages", "1",
        "--replicas", "2", "--microbatches", "2", "--schedule", "1f1b", "-o", p])
    out, local = os.path.join(tmp, "run.json"), os.path.join(tmp, "local.json")
    sh([binary, "run", p, "--model", MODEL, "--steps", "3", "--record", out])
    sh([binary, "run", p, "--model", MODEL, "--steps", "3", "--record", local, "--in-process"])
    rec = record(out)
    assert rec["replicas"] == 2 and len(rec["ranks"]) == 2, rec["ranks"]
    for a, b in zip(losses(rec), losses(record(local))):
        assert abs(a - b) <= 1e-5 * max(1.0, abs(a)), (losses(rec), losses(record(local)))


def sharded_optimizer_over_gloo(binary, tmp):
    """ZeRO-1 over Gloo's reduce-scatter and all-gather (two replicas of a one-stage pipeline, Adam
    on models/tiny-gpt.json): the weights after three steps equal the unsharded
    run's and the in-process sharded run's; the record says the plan's sharding."""
    import torch
    from safetensors.torch import load_file
    saved = {}
    for sharded in ("on", "off"):
        p = os.path.join(tmp, f"p-{sharded}.json")
        sh([binary, "plan", "--profile", PROFILE, "--cluster", CLUSTER, "--global-batch", "16", "--stages", "1",
            "--replicas", "2", "--microbatches", "2", "--schedule", "1f1b", "--sharded-optimizer", sharded, "-o", p])
        assert record(p).get("sharded_optimizer", False) == (sharded == "on"), record(p)
        saved[sharded] = os.path.join(tmp, f"w-{sharded}.safetensors")
        sh([binary, "run", p, "--model", MODEL, "--steps", "3", "--save-weights", saved[sharded]])
        if sharded == "on":
            saved["local"] = os.path.join(tmp, "w-local.safetensors")
            sh([binary, "run", p, "--model", MODEL, "--steps", "3", "--save-weights", saved["local"], "--in-process"])
    a, b, c = (load_file(saved[k]) for k in ("on", "off", "local"))
    assert a.keys() == b.keys() == c.keys() and a, (a.keys(), b.keys())
    for name in a:
        assert torch.allclose(a[name], b[name], rtol=0, atol=1e-6), (name, (a[name] - b[name]).abs().max())
        assert torch.allclose(a[name], c[name], rtol=0, atol=1e-6), (name, (a[name] - c[name]).abs().max())


def tensor_parallel_refused(binary, tmp):
    """A plan with t > 1 plans and simulates; run refuses it with one line naming t."""
    p = os.path.join(tmp, "t8.json")
    sh([binary, "plan", "--profile", os.path.join(SOURCE, "profiles", "gpt3-13b-a100-80gb.json"), "--cluster",
        os.path.join(SOURCE, "profiles", "clusters", "a100-80gb-8.json"), "--global-batch", "64",
        "--tensor-parallel", "8", "-o", p])
    assert record(p)["tensor_parallel"] == 8
    sh([binary, "simulate", p])
    result = sh([binary, "run", p, "--model", MODEL, "--steps", "1"], check=False)
    assert result.returncode == 1, result
    lines = [l for l in result.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and "t = 8 devices (tensor parallelism)" in lines[0], result.stderr


def two_nodes_loopback(binary, tmp):
    """Two launcher invocations on loopback acting as two nodes form one pipeline."""
    p = plan(binary, tmp, "p", stages=2, microbatches=2, schedule="gpipe")
    out = os.path.join(tmp, "run.json")
    port = str(free_port())
    common = ["run", p, "--model", MODEL, "--steps", "2", "--nnodes", "2", "--master-addr", "127.0.0.1",
              "--master-port", port, "--timeout", "60"]
    node0 = subprocess.Popen([binary] + common + ["--node-rank", "0", "--record", out],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    node1 = subprocess.Popen([binary] + common + ["--node-rank", "1"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out0, err0 = node0.communicate(timeout=120)
    out1, err1 = node1.communicate(timeout=120)
    assert node0.returncode == 0 and node1.returncode == 0, (err0, err1)
    assert "1 rank on this node (2 in the job)" in err0, err0
    rec = record(out)
    assert len(rec["ranks"]) == 2 and len(rec["steps"]) == 2
    assert "step 2/2" in out1, out1  # the last stage's rank prints progress, on node 1


def resume_equals_uninterrupted(binary, tmp):
    """A run stopped after 2 steps and resumed to 4 has the losses of a 4-step run."""
    p = plan(binary, tmp, "p", schedule="zb-h1")
    full = os.path.join(tmp, "full.json")
    sh([binary, "run", p, "--model", MODEL, "--steps", "4", "--record", full])
    ckpt = os.path.join(tmp, "ckpt")
    sh([binary, "run", p, "--model", MODEL, "--steps", "2", "--checkpoint-dir", ckpt, "--checkpoint-every", "1"])
    assert open(os.path.join(ckpt, "latest")).read().strip() == "step-2"
    resumed = os.path.join(tmp, "resumed.json")
    sh([binary, "run", p, "--model", MODEL, "--steps", "4", "--checkpoint-dir", ckpt, "--resume",
        "--record", resumed])
    a, b = losses(record(full))[2:], losses(record(resumed))
    assert len(b) == 2 and all(abs(x - y) <= 1e-6 for x, y in zip(a, b)), (a, b)


def resume_other_plan_refused(binary, tmp):
    p1 = plan(binary, tmp, "p1", microbatches=4)
    p2 = plan(binary, tmp, "p2", microbatches=2)
    ckpt = os.path.join(tmp, "ckpt")
    sh([binary, "run", p1, "--model", MODEL, "--steps", "1", "--checkpoint-dir", ckpt])
    result = sh([binary, "run", p2, "--model", MODEL, "--steps", "2", "--checkpoint-dir", ckpt, "--resume"],
                check=False)
    assert result.returncode == 1, result
    assert "is of another plan or model" in result.stderr and "M=4" in result.stderr, result.stderr


def checkpoint_disk_full(binary, tmp):
    """A checkpoint write that fails midway (the disk full, simulated by a file-size limit: the
    kernel refuses the write as it would on a full disk) fails the run with the reason, leaves the
    previous checkpoint as `latest` and loadable, and no half-written file; a resume continues
    from it with the losses of an uninterrupted run."""
    import resource
    p = plan(binary, tmp, "p")
    full = os.path.join(tmp, "full.json")
    sh([binary, "run", p, "--model", MODEL, "--steps", "4", "--record", full])
    ckpt = os.path.join(tmp, "ckpt")
    sh([binary, "run", p, "--model", MODEL, "--steps", "2", "--checkpoint-dir", ckpt, "--checkpoint-every", "1"])
    step2 = os.path.join(ckpt, "step-2")
    before = {name: open(os.path.join(step2, name), "rb").read() for name in os.listdir(step2)}
    assert min(len(b) for name, b in before.items() if name.endswith(".pt")) > 300_000, before.keys()

    def disk_full():  # in the launcher, inherited by the ranks: writes past 300 KB fail with EFBIG
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (300_000, 300_000))

    result = sh([binary, "run", p, "--model", MODEL, "--steps", "4", "--checkpoint-dir", ckpt, "--checkpoint-every",
                 "1", "--resume"], check=False, preexec_fn=disk_full)
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "write error on" in result.stderr and "File too large" in result.stderr, result.stderr
    assert "terminate called" not in result.stderr and "Aborted" not in result.stderr, result.stderr
    assert open(os.path.join(ckpt, "latest")).read().strip() == "step-2"
    assert {name: open(os.path.join(step2, name), "rb").read() for name in os.listdir(step2)} == before
    leftovers = [f for _, _, files in os.walk(ckpt) for f in files if f.endswith(".tmp")]
    assert leftovers == [], leftovers
    resumed = os.path.join(tmp, "resumed.json")
    sh([binary, "run", p, "--model", MODEL, "--steps", "4", "--checkpoint-dir", ckpt, "--resume", "--record", resumed])
    a, b = losses(record(full))[2:], losses(record(resumed))
    assert len(b) == 2 and all(abs(x - y) <= 1e-6 for x, y in zip(a, b)), (a, b)
    print("the failed run said:\n" + "\n".join(l for l in result.stderr.splitlines() if "write error" in l or "rank" in l))


def long_run(binary, tmp, settle, *flags):
    """A launcher training the two-rank plan for a long time, once both ranks have run for `settle`
    seconds: (launcher, rank process ids in start order)."""
    p = plan(binary, tmp, "p")
    launcher = subprocess.Popen([binary, "run", p, "--model", MODEL, "--steps", "100000", *flags],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    children = []
    while time.monotonic() < deadline and len(children) < 2:
        children = sh(["pgrep", "-P", str(launcher.pid)], check=False).stdout.split()
        time.sleep(0.1)
    if len(children) < 2:
        launcher.kill()
        raise AssertionError(f"the launcher did not start two ranks: {children}")
    time.sleep(settle)
    return launcher, sorted(children, key=int)


def rank_killed(binary, tmp):
    """Killing one rank mid-run stops the others within the timeout, and the launcher names it."""
    launcher, children = long_run(binary, tmp, 2, "--timeout", "10")  # let them train a little
    victim = int(children[1])
    os.kill(victim, signal.SIGKILL)
    killed_at = time.monotonic()
    _, err = launcher.communicate(timeout=60)
    waited = time.monotonic() - killed_at
    assert launcher.returncode == 1, (launcher.returncode, err)
    assert "killed by signal 9" in err and "(first to fail)" in err, err
    assert waited < 25, f"the other rank took {waited:.1f} s to stop"
    assert sh(["pgrep", "-P", str(launcher.pid)], check=False).stdout.strip() == ""
    print(f"launcher exited {waited:.2f} s after the kill:\n{err}")


def listening_sockets(pid):
    """The local addresses (hex, as /proc/net shows them) on which process `pid` listens."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(table).read().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                found.append(fields[1])
    return found


def rendezvous_on_loopback(binary, tmp):
    """By default every socket the ranks listen on (the c10d store, Gloo) is bound to loopback."""
    launcher, children = long_run(binary, tmp, 3)  # past the rendezvous, training
    addresses = [a for pid in children for a in listening_sockets(pid)]
    launcher.send_signal(signal.SIGINT)
    _, err = launcher.communicate(timeout=60)
    assert len(children) == 2 and addresses, (children, addresses, err)
    loopback = ("0100007F:", "00000000000000000000000001000000:")  # 127.0.0.1, ::1
    assert all(a.startswith(loopback) for a in addresses), addresses
    print(f"{len(addresses)} listening sockets, all on loopback: {addresses}")


def interrupted_launcher(binary, tmp):
    """Ctrl-C on the launcher stops every rank; none is left behind."""
    launcher, children = long_run(binary, tmp, 2)
    launcher.send_signal(signal.SIGINT)
    _, err = launcher.communicate(timeout=60)
    assert launcher.returncode != 0, err
    for pid in children:
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z", pid


def bad_input(binary, tmp):
    p = plan(binary, tmp, "p")
    result = sh([binary, "run", p, "--model", os.path.join(SOURCE, "models", "small-cnn.json"), "--steps", "1"],
                check=False)
    assert result.returncode == 1 and "layers but the plan's profile" in result.stderr, result.stderr


def torchscript_model(binary, tmp):
    """A model written in PyTorch: a scripted nn.Sequential whose children become the layers."""
    import torch
    net = torch.nn.Sequential(torch.nn.Embedding(96, 32), torch.nn.Linear(32, 64), torch.nn.GELU(),
                              torch.nn.Linear(64, 96))
    torch.jit.script(net).save(os.path.join(tmp, "net.pt"))
    model = {"format": "gpipe-model/1", "name": "scripted", "input": {"kind": "tokens", "vocab": 96, "seq_len": 16},
             "data": {"kind": "text", "path": os.path.join(SOURCE, "models", "text", "public-domain.txt")},
             "learning_rate": 0.01, "torchscript": "net.pt"}
    with open(os.path.join(tmp, "model.json"), "w") as f:
        json.dump(model, f)
    layer = {"forward_ms": 1, "backward_ms": 2, "param_bytes": 1000, "activation_bytes": 1000, "output_bytes": 100}
    profile = {"format": "gpipe-profile/1", "model": "scripted", "device": "cpu", "microbatch_size": 4,
               "layers": [dict(layer, name=f"layer{i}") for i in range(4)]}
    with open(os.path.join(tmp, "profile.json"), "w") as f:
        json.dump(profile, f)
    p = os.path.join(tmp, "plan.json")
    sh([binary, "plan", "--profile", os.path.join(tmp, "profile.json"), "--cluster", CLUSTER, "--global-batch", "16",
        "--stages", "2", "--microbatches", "4", "--schedule", "1f1b", "-o", p])
    out = os.path.join(tmp, "run.json")
    sh([binary, "run", p, "--model", os.path.join(tmp, "model.json"), "--steps", "8", "--record", out])
    l = losses(record(out))
    assert l[-1] < l[0], l


def scripted_model(tmp, name, net):
    """Saves `net` (an nn.Sequential) scripted, and a gpipe-model/1 naming it; returns the model path."""
    import torch
    torch.jit.script(net).save(os.path.join(tmp, name + ".pt"))
    model = {"format": "gpipe-model/1", "name": name, "input": {"kind": "tokens", "vocab": 96, "seq_len": 16},
             "data": {"kind": "text", "path": os.path.join(SOURCE, "models", "text", "public-domain.txt")},
             "learning_rate": 0.05, "torchscript": name + ".pt"}
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        json.dump(model, f)
    return path


def cut_plan(binary, tmp, name, profile, cut, remat, microbatches=4, batch=16, schedule="1f1b", stages=None):
    """A K=2 plan of `profile` cut before layer `cut` (1 rank when cut is None, unless `stages` says
    how many: then the planner's own cut)."""
    path = os.path.join(tmp, name + ".json")
    stages = stages or (1 if cut is None else 2)
    sh([binary, "plan", "--profile", profile, "--cluster", CLUSTER, "--global-batch", str(batch),
        "--stages", str(stages), "--microbatches", str(microbatches), "--schedule", schedule,
        "--remat", remat, "--replicas", "1", "-o", path])
    if cut is not None:
        doc = record(path)
        doc["stages"][0]["layers"][1] = cut
        doc["stages"][1]["layers"][0] = cut
        with open(path, "w") as f:
            json.dump(doc, f)
    return path


def inplace_first_layer(binary, tmp):
    """ReLU(inplace=True) as the first layer of a stage and of the profile's one-layer passes: the
    profiler and both stages hand it a copy, so profile works and K=2 trains as one process does,
    remat off and on (issue 15: a stock ResNet's in-place ReLU aborted both)."""
    import torch
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Embedding(96, 32), torch.nn.ReLU(inplace=True), torch.nn.Linear(32, 64),
                              torch.nn.ReLU(inplace=True), torch.nn.Linear(64, 96))
    model = scripted_model(tmp, "inplace", net)
    profile = os.path.join(tmp, "profile.json")
    sh([binary, "profile", "--model", model, "--microbatch-size", "4", "--warmup", "0", "--repeats", "1",
        "--ranks-per-node", "1", "-o", profile], cwd=tmp)
    one = os.path.join(tmp, "one.json")
    sh([binary, "run", cut_plan(binary, tmp, "p1", profile, None, "off"), "--model", model, "--steps", "3",
        "--record", one], cwd=tmp)
    for cut in (1, 3):
        for remat in ("off", "on"):
            out = os.path.join(tmp, f"run-{cut}-{remat}.json")
            sh([binary, "run", cut_plan(binary, tmp, f"p{cut}{remat}", profile, cut, remat), "--model", model,
                "--steps", "3", "--record", out], cwd=tmp)
            got, want = losses(record(out)), losses(record(one))
            assert all(abs(a - b) < 1e-5 for a, b in zip(got, want)), (cut, remat, got, want)


def resnet18_torchvision(binary, tmp):
    """torchvision's ResNet-18, unmodified (ReLU(inplace=True)), from models/examples/resnet18.py:
    profiled, planned with K=2 (cut so that stage 1 starts at the in-place ReLU, and as the planner
    cuts it), trained over Gloo with remat off and on, with the losses of one process that runs the
    same micro-batches (batch norm's statistics are per micro-batch, so the same M)."""
    sh([sys.executable, os.path.join(SOURCE, "models", "examples", "resnet18.py"), os.path.join(tmp, "resnet18.pt")])
    shutil.copy(os.path.join(SOURCE, "models", "examples", "resnet18.json"), tmp)
    model = os.path.join(tmp, "resnet18.json")
    profile = os.path.join(tmp, "profile.json")
    sh([binary, "profile", "--model", model, "--microbatch-size", "4", "--warmup", "0", "--repeats", "1",
        "--ranks-per-node", "1", "-o", profile], cwd=tmp)
    assert len(record(profile)["layers"]) == 11  # conv1 bn1 relu maxpool layer1-4 avgpool flatten fc
    one = os.path.join(tmp, "one.json")
    sh([binary, "run", cut_plan(binary, tmp, "p1", profile, None, "off", microbatches=2, batch=8), "--model", model,
        "--steps", "3", "--record", one], cwd=tmp)
    want = losses(record(one))
    for cut, remat in ((2, "off"), (2, "on"), (None, "off")):
        if cut is None:  # the planner's own cut, K=2
            p = os.path.join(tmp, "p2-planned.json")
            sh([binary, "plan", "--profile", profile, "--cluster", CLUSTER, "--global-batch", "8", "--stages", "2",
                "--microbatches", "2", "--schedule", "1f1b", "--remat", remat, "--replicas", "1", "-o", p])
        else:
            p = cut_plan(binary, tmp, f"p2-{cut}-{remat}", profile, cut, remat, microbatches=2, batch=8)
        out = os.path.join(tmp, f"run-{cut}-{remat}.json")
        sh([binary, "run", p, "--model", model, "--steps", "3", "--record", out], cwd=tmp)
        got = losses(record(out))
        assert all(abs(a - b) < 1e-4 * max(1.0, abs(b)) for a, b in zip(got, want)), (cut, remat, got, want)


def bad_scripted_layers(binary, tmp):
    """A child that returns nothing, and one that takes two arguments: profile and run end with one
    line naming the model and the layer, exit 1, never an abort or a C++ stack trace."""
    import torch

    class Nothing(torch.nn.Module):
        def forward(self, x):
            return None

    class TwoArgs(torch.nn.Module):
        def forward(self, x, y):
            return x + y

    class Holder(torch.nn.Module):
        """Children that an nn.Sequential would not compile with; its own forward is never used."""
        def __init__(self, *layers):
            super().__init__()
            for i, layer in enumerate(layers):
                self.add_module(str(i), layer)

        def forward(self, x):
            return x

    for name, bad in (("returns-nothing", Nothing()), ("two-arguments", TwoArgs())):
        model = scripted_model(tmp, name, Holder(torch.nn.Embedding(96, 8), bad, torch.nn.Linear(8, 96)))
        result = sh([binary, "profile", "--model", model, "--microbatch-size", "4", "--warmup", "0", "--repeats", "1",
                     "-o", os.path.join(tmp, "x.json")], check=False, cwd=tmp)
        err = result.stderr
        assert result.returncode == 1, (name, result.returncode, err)
        assert f"model {name}, layer 1 (1), forward" in err, (name, err)
        assert "terminate called" not in err and "Exception raised from" not in err and "frame #" not in err, err


def python_model_runs(binary, tmp, example, runs, layers):
    """A model of models/examples given as "python": "file.py:build": exported through the binary's
    exporter (cached in tmp), profiled, then trained with K=1 and each of `runs` ((cut or None for
    the planner's own K=2 cut, remat, schedule)) over Gloo; every run's losses equal one process's.
    Returns the profile."""
    os.environ["GPIPE_CACHE_DIR"] = os.path.join(tmp, "cache")
    model = os.path.join(SOURCE, "models", "examples", example + ".json")
    profile = os.path.join(tmp, "profile.json")
    sh([binary, "profile", "--model", model, "--microbatch-size", "4", "--warmup", "0", "--repeats", "1",
        "--ranks-per-node", "1", "-o", profile], cwd=tmp)
    doc = record(profile)
    assert len(doc["layers"]) == layers, [l["name"] for l in doc["layers"]]
    one = os.path.join(tmp, "one.json")
    sh([binary, "run", cut_plan(binary, tmp, "p1", profile, None, "off", microbatches=2, batch=8), "--model", model,
        "--steps", "3", "--record", one], cwd=tmp)
    want = losses(record(one))
    for cut, remat, schedule in runs:
        p = cut_plan(binary, tmp, f"p2-{cut}-{remat}-{schedule}", profile, cut, remat, microbatches=2, batch=8,
                     schedule=schedule, stages=2)
        out = os.path.join(tmp, f"run-{cut}-{remat}-{schedule}.json")
        sh([binary, "run", p, "--model", model, "--steps", "3", "--record", out], cwd=tmp)
        got = losses(record(out))
        assert len(got) == len(want) == 3, (got, want)
        assert all(abs(a - b) < 1e-4 * max(1.0, abs(b)) for a, b in zip(got, want)), (cut, remat, schedule, got, want)
    return doc


def gpt2_transformers(binary, tmp):
    """Hugging Face's GPT-2 (4 blocks, random weights) with its LM head tied to the token embedding,
    from models/examples/gpt2.py: the profile names the tie; K=2 with the embedding and the head on
    different ranks (their gradients summed between them) trains as one process does, remat off
    and on."""
    doc = python_model_runs(binary, tmp, "gpt2", [(None, "off", "1f1b"), (3, "on", "1f1b"), (3, "off", "zb-h1")], 6)
    ties = doc.get("tied_parameters", [])
    assert len(ties) == 1 and ties[0]["layers"] == [0, 5] and ties[0]["bytes"] == 96 * 128 * 4, ties


def gpt2_recipe_tied_clip(binary, tmp):
    """GPT-2 with its LM head tied to the token embedding, trained with AdamW, warm-up then cosine
    decay and clipping by the global gradient norm: K=2 with the embedding and the head on
    different ranks reports each step's norm and loss as K=1 does (the tie counted once), every
    step clips, and the record and the progress lines carry the learning rate and the norm."""
    os.environ["GPIPE_CACHE_DIR"] = os.path.join(tmp, "cache")
    training = {"learning_rate": 3e-3, "betas": [0.9, 0.95], "weight_decay": 0.1, "clip_grad_norm": 0.2,
                "schedule": {"warmup_steps": 2, "decay": "cosine", "decay_steps": 4, "min_learning_rate": 3e-4}}
    model = gpt2_model_file(tmp, "gpt2-recipe", training=training)
    profile = gpt2_fake_profile(tmp)
    want = [0.003 / 2, 0.003, 0.003, (0.003 + 0.0003) / 2, 0.0003]
    runs = {}
    for cut, schedule in ((None, "1f1b"), (3, "1f1b"), (3, "zb-h1")):
        p = cut_plan(binary, tmp, f"recipe-{cut}-{schedule}", profile, cut, "off", microbatches=2, batch=8,
                     schedule=schedule)
        assert record(p)["optimizer"] == "adam", record(p)["optimizer"]  # AdamW: an fp32 profile's default
        out = os.path.join(tmp, f"recipe-{cut}-{schedule}-run.json")
        result = sh([binary, "run", p, "--model", model, "--steps", "5", "--record", out], cwd=tmp)
        assert "lr 1.50e-03  grad norm " in result.stdout, result.stdout
        steps = record(out)["steps"]
        assert [round(s["learning_rate"], 12) for s in steps] == [round(w, 12) for w in want], steps
        assert all(s["grad_norm"] > training["clip_grad_norm"] for s in steps), steps
        runs[(cut, schedule)] = steps
    one = runs[(None, "1f1b")]
    for key, steps in runs.items():
        for a, b in zip(steps, one):
            assert abs(a["grad_norm"] - b["grad_norm"]) <= 1e-4 * b["grad_norm"], (key, a, b)
            assert abs(a["loss"] - b["loss"]) <= 1e-4 * max(1.0, abs(b["loss"])), (key, a, b)


def gpt2_model_file(tmp, name, data=None, training=None):
    """models/examples/gpt2.json written into tmp with absolute paths, another data spec and a
    training section."""
    examples = os.path.join(SOURCE, "models", "examples")
    doc = record(os.path.join(examples, "gpt2.json"))
    doc.pop("learning_rate", None)
    doc["python"] = os.path.join(examples, "gpt2.py") + ":build"
    doc["data"] = data or {"kind": "text", "path": os.path.join(SOURCE, "models", "text", "public-domain.txt")}
    if training:
        doc["training"] = training
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        json.dump(doc, f)
    return path


def gpt2_fake_profile(tmp, layers=6):
    """A profile of six layers (GPT-2's, the tiny GPT's) with made-up costs: enough for `plan` to
    cut it."""
    layer = {"forward_ms": 1, "backward_ms": 2, "backward_weight_ms": 1, "param_bytes": 1000, "activation_bytes": 1000,
             "output_bytes": 100}
    profile = os.path.join(tmp, "gpt2-profile.json")
    with open(profile, "w") as f:
        json.dump({"format": "gpipe-profile/1", "model": "gpt2", "device": "cpu", "microbatch_size": 4,
                   "dtype": "fp32", "layers": [dict(layer, name=f"layer{i}") for i in range(layers)]}, f)
    return profile


def gpt2_weights_to_pytorch(binary, tmp):
    """GPT-2 trained K=2 (tied embedding and head on different ranks) saves one safetensors file
    that the builder's own nn.Sequential loads: its loss on step 0's batch equals the executor's
    from the same file (K=1 and K=2), the tie is stored once, and weights saved by PyTorch start a
    run (fine-tuning) at PyTorch's loss. A mis-shaped tensor is one error line naming it."""
    import torch
    from safetensors.torch import load_file, load_model, save_file, save_model
    sys.path.insert(0, os.path.join(SOURCE, "models", "examples"))
    import gpt2
    os.environ["GPIPE_CACHE_DIR"] = os.path.join(tmp, "cache")
    model = gpt2_model_file(tmp, "gpt2-random", data={"kind": "random-tokens"})
    profile = gpt2_fake_profile(tmp)
    k1 = cut_plan(binary, tmp, "w-k1", profile, None, "off", microbatches=2, batch=8)
    k2 = cut_plan(binary, tmp, "w-k2", profile, 3, "off", microbatches=2, batch=8)
    saved = os.path.join(tmp, "trained.safetensors")
    sh([binary, "run", k2, "--model", model, "--steps", "3", "--save-weights", saved], cwd=tmp)
    assert not [f for f in os.listdir(tmp) if ".part-" in f], os.listdir(tmp)

    # Step 0's batch of random tokens, as executor/data.cpp draws it from the model's seed.
    step_seed = (1234 * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019 * 1) % 2**64
    gen = torch.Generator().manual_seed(step_seed)
    tokens = torch.randint(0, 96, (8, 64), generator=gen)
    target = torch.randint(0, 96, (8, 64), generator=gen)

    def torch_loss(seq):
        with torch.no_grad():
            logits = seq(tokens)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, 96), target.reshape(-1)).item()

    def executor_loss(plan_path, weights):
        out = os.path.join(tmp, "first-step.json")
        sh([binary, "run", plan_path, "--model", model, "--steps", "1", "--init-weights", weights, "--record", out], cwd=tmp)
        return record(out)["steps"][0]["loss"]

    seq = gpt2.build()
    missing, unexpected = seq.load_state_dict(load_file(saved), strict=False)
    assert missing == ["5.lm_head.weight"] and unexpected == [], (missing, unexpected)  # the tie, once
    load_model(seq, saved)  # safetensors' own loader restores the alias
    assert seq[5].lm_head.weight is seq[0].wte.weight
    want = torch_loss(seq)
    for plan_path in (k1, k2):
        got = executor_loss(plan_path, saved)
        assert abs(got - want) <= 1e-4 * abs(want), (plan_path, got, want)

    torch.manual_seed(99)
    mine = gpt2.build()  # weights PyTorch made: in through --init-weights
    theirs = os.path.join(tmp, "from-pytorch.safetensors")
    save_model(mine, theirs)
    got, want = executor_loss(k2, theirs), torch_loss(mine)
    assert abs(got - want) <= 1e-4 * abs(want), (got, want)

    state = load_file(saved)
    state["0.wte.weight"] = state["0.wte.weight"][:, :64].contiguous()
    bad = os.path.join(tmp, "bad.safetensors")
    save_file(state, bad)
    result = sh([binary, "run", k2, "--model", model, "--steps", "1", "--init-weights", bad], check=False, cwd=tmp)
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert 'tensor "0.wte.weight" has shape [96, 64] where layer 0\'s wte.weight needs [96, 128]' in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and "terminate called" not in result.stderr, result.stderr


def llama_weights_to_pytorch(binary, tmp):
    """Llama's rotary inv_freq is a non-persistent buffer: the saved weights leave it out, so the
    builder's nn.Sequential loads them with strict=True, and a file PyTorch saved (without it)
    starts a run."""
    import torch
    from safetensors.torch import load_file, save_file
    sys.path.insert(0, os.path.join(SOURCE, "models", "examples"))
    import llama
    os.environ["GPIPE_CACHE_DIR"] = os.path.join(tmp, "cache")
    examples = os.path.join(SOURCE, "models", "examples")
    doc = record(os.path.join(examples, "llama.json"))
    doc["python"] = os.path.join(examples, "llama.py") + ":build"
    doc["data"] = {"kind": "random-tokens"}
    model = os.path.join(tmp, "llama.json")
    with open(model, "w") as f:
        json.dump(doc, f)
    plan_path = cut_plan(binary, tmp, "llama-k2", gpt2_fake_profile(tmp, 4), 2, "off", microbatches=2, batch=8)
    saved = os.path.join(tmp, "llama.safetensors")
    sh([binary, "run", plan_path, "--model", model, "--steps", "1", "--save-weights", saved], cwd=tmp)
    state = load_file(saved)
    assert not [k for k in state if "inv_freq" in k], sorted(state)
    seq = llama.build()
    seq.load_state_dict(state, strict=True)
    theirs = os.path.join(tmp, "from-pytorch.safetensors")
    save_file({k: v.contiguous() for k, v in llama.build().state_dict().items()}, theirs)
    sh([binary, "run", plan_path, "--model", model, "--steps", "1", "--init-weights", theirs], cwd=tmp)


def user_token_data(binary, tmp):
    """A text prepared by scripts/prepare_tokens.py into nanoGPT's train.bin/val.bin and Megatron's
    .bin/.idx trains the tiny GPT (a byte vocabulary of 256) K=2 with evaluation every two steps:
    the record and the progress lines hold the evaluation loss, and the Megatron dataset (the same
    stream of tokens) gives the same losses. A truncated file and a token outside the vocabulary
    each stop `run` with one line naming the file and the offset."""
    data = os.path.join(tmp, "data")
    sh([sys.executable, os.path.join(SOURCE, "scripts", "prepare_tokens.py"),
        os.path.join(SOURCE, "models", "text", "public-domain.txt"), data, "--megatron"])
    doc = record(MODEL)
    doc["input"]["vocab"] = doc["layers"][0]["vocab"] = doc["layers"][-1]["vocab"] = 256
    plan_path = cut_plan(binary, tmp, "tokens-k2", gpt2_fake_profile(tmp), 3, "off", microbatches=2, batch=8)

    def run(name, data_spec, vocab=256, check=True):
        doc["input"]["vocab"] = vocab
        doc["data"] = data_spec
        model = os.path.join(tmp, name + ".json")
        with open(model, "w") as f:
            json.dump(doc, f)
        out = os.path.join(tmp, name + "-run.json")
        result = sh([binary, "run", plan_path, "--model", model, "--steps", "4", "--eval-every", "2",
                     "--eval-batches", "2", "--record", out], check=check, cwd=tmp)
        return result, (record(out)["steps"] if check else None)

    result, flat = run("flat", {"kind": "tokens-file", "path": os.path.join(data, "train.bin"), "dtype": "uint16",
                                "validation": {"path": os.path.join(data, "val.bin")}})
    assert [("eval_loss" in s) for s in flat] == [False, True, False, True], flat
    assert "eval loss " in result.stdout, result.stdout
    _, megatron = run("megatron", {"kind": "megatron", "path": os.path.join(data, "train_text_document"),
                                   "validation": {"path": os.path.join(data, "val_text_document")}})
    for a, b in zip(flat, megatron):
        assert abs(a["loss"] - b["loss"]) < 1e-6 and abs(a.get("eval_loss", 0) - b.get("eval_loss", 0)) < 1e-6, (a, b)
    _, fraction = run("fraction", {"kind": "tokens-file", "path": os.path.join(data, "train.bin"),
                                   "validation_fraction": 0.1})
    assert fraction[1]["eval_loss"] != flat[1]["eval_loss"], (fraction[1], flat[1])  # other held-out tokens

    truncated = os.path.join(tmp, "truncated.bin")
    with open(os.path.join(data, "train.bin"), "rb") as f, open(truncated, "wb") as g:
        g.write(f.read(2001))
    for name, spec, vocab, expect in (
            ("truncated", {"kind": "tokens-file", "path": truncated, "validation_fraction": 0.1}, 256,
             f"{truncated}: 2001 bytes is not a whole number of uint16 tokens; the file is truncated at offset 2000"),
            ("small-vocab", {"kind": "tokens-file", "path": os.path.join(data, "train.bin"), "validation_fraction": 0.1},
             96, "is outside the model's vocabulary of 96; is the file's dtype uint16")):
        doc["layers"][0]["vocab"] = doc["layers"][-1]["vocab"] = vocab
        result, _ = run(name, spec, vocab=vocab, check=False)
        err = result.stderr.strip()
        assert result.returncode == 1 and expect in err, (name, result.returncode, err)
        assert "Traceback" not in err and "terminate called" not in err and "frame #" not in err, err


def npy_images(binary, tmp):
    """Images and labels saved by numpy.save train the small CNN K=2 with a held-out tenth to
    evaluate on; a label outside the classes stops `run` with one line naming the labels file."""
    import numpy
    rng = numpy.random.default_rng(5)
    images = rng.integers(0, 256, size=(64, 32, 32, 3), dtype=numpy.uint8)
    labels = rng.integers(0, 10, size=64).astype(numpy.int64)
    numpy.save(os.path.join(tmp, "images.npy"), images)
    numpy.save(os.path.join(tmp, "labels.npy"), labels)
    doc = record(os.path.join(SOURCE, "models", "small-cnn.json"))
    doc["data"] = {"kind": "npy-images", "images": "images.npy", "labels": "labels.npy", "validation_fraction": 0.1}
    model = os.path.join(tmp, "cnn.json")
    with open(model, "w") as f:
        json.dump(doc, f)
    plan_path = cut_plan(binary, tmp, "cnn-k2", gpt2_fake_profile(tmp, len(doc["layers"])), 3, "off", microbatches=2, batch=8)
    out = os.path.join(tmp, "cnn-run.json")
    sh([binary, "run", plan_path, "--model", model, "--steps", "2", "--eval-every", "1", "--record", out], cwd=tmp)
    assert all("eval_loss" in s for s in record(out)["steps"]), record(out)["steps"]
    labels[:] = 10  # every label one past the classes: the first batch meets one
    numpy.save(os.path.join(tmp, "labels.npy"), labels)
    result = sh([binary, "run", plan_path, "--model", model, "--steps", "1"], check=False, cwd=tmp)
    assert result.returncode == 1 and "labels.npy: label 10 of image " in result.stderr, (result.returncode, result.stderr)
    assert "is outside the model's 10 classes" in result.stderr, result.stderr


def llama_tuple_boundaries(binary, tmp):
    """A Llama (transformers' LlamaConfig, tiny) whose layers pass (hidden states, cos, sin, int64
    position ids): K=2 cut after the embedding and between decoder layers, remat off and on, trains
    as one process does."""
    python_model_runs(binary, tmp, "llama", [(1, "off", "1f1b"), (2, "on", "1f1b"), (2, "off", "zb-h1")], 4)


def bad_python_models(binary, tmp):
    """A "python" model whose child takes an extra argument, one whose child returns None, a function
    that is not there: profile and run end with exit 1 and one line naming the model, the function
    and the layer; no Python traceback, no C++ stack trace."""
    os.environ["GPIPE_CACHE_DIR"] = os.path.join(tmp, "cache")
    shutil.copy(os.path.join(SOURCE, "tests", "python", "bad_models.py"), tmp)
    for function, expect in (("extra_argument", "layer 1"), ("returns_none", "layer 1"), ("no_such_function", "no_such_function")):
        model = os.path.join(tmp, function + ".json")
        with open(model, "w") as f:
            json.dump({"format": "gpipe-model/1", "name": "bad-" + function,
                       "input": {"kind": "tokens", "vocab": 96, "seq_len": 16}, "data": {"kind": "random-tokens"},
                       "python": "bad_models.py:" + function}, f)
        for command in (["profile", "--model", model, "--warmup", "0", "--repeats", "1", "-o", os.path.join(tmp, "x.json")],
                        ["run", PLAN_FOR_BAD_MODELS(binary, tmp), "--model", model, "--steps", "1"]):
            result = sh([binary] + command, check=False, cwd=tmp)
            err = result.stderr
            assert result.returncode == 1, (function, command[0], result.returncode, err)
            assert f"model bad-{function} (" in err and expect in err, (function, err)
            assert len(err.strip().splitlines()) == 1, (function, err)
            assert "Traceback" not in err and "terminate called" not in err and "frame #" not in err, err


def PLAN_FOR_BAD_MODELS(binary, tmp):
    layer = {"forward_ms": 1, "backward_ms": 2, "param_bytes": 1000, "activation_bytes": 1000, "output_bytes": 100}
    profile = os.path.join(tmp, "bad-profile.json")
    with open(profile, "w") as f:
        json.dump({"format": "gpipe-profile/1", "model": "bad", "device": "cpu", "microbatch_size": 4,
                   "layers": [dict(layer, name=f"layer{i}") for i in range(3)]}, f)
    return cut_plan(binary, tmp, "bad-plan", profile, None, "off")


def first_failure_named(binary, tmp):
    """Rank 1's own layer fails; rank 0 then only loses its connection. The launcher names rank 1
    as the first to fail, by the time each rank noted its own error, not by which exited first."""
    import torch

    class Boom(torch.nn.Module):
        def forward(self, x):
            if x.numel() > 0:
                raise RuntimeError("boom in stage 1")
            return x

    net = torch.nn.Sequential(torch.nn.Embedding(96, 8), torch.nn.Linear(8, 8), Boom(), torch.nn.Linear(8, 96))
    model = scripted_model(tmp, "boom", net)
    layer = {"forward_ms": 1, "backward_ms": 2, "param_bytes": 1000, "activation_bytes": 1000, "output_bytes": 100}
    profile = os.path.join(tmp, "profile.json")
    with open(profile, "w") as f:
        json.dump({"format": "gpipe-profile/1", "model": "boom", "device": "cpu", "microbatch_size": 4,
                   "layers": [dict(layer, name=f"layer{i}") for i in range(4)]}, f)
    result = sh([binary, "run", cut_plan(binary, tmp, "p", profile, 2, "off"), "--model", model, "--steps", "2",
                 "--timeout", "20"], check=False, cwd=tmp)
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "rank 1 exited with status 1 (first to fail)" in result.stderr, result.stderr
    assert "boom in stage 1" in result.stderr, result.stderr


def profile_then_plan(binary, tmp):
    """gpipe-plan profile writes a profile that plan accepts, at several micro-batch sizes; the
    planner says when it interpolates between them; profile-links writes a cluster plan accepts."""
    profile = os.path.join(tmp, "profile.json")
    result = sh([binary, "profile", "--model", MODEL, "--microbatch-size", "4,8", "--warmup", "1", "--repeats", "3",
                 "--ranks-per-node", "2", "-o", profile])
    assert "sum of layers" in result.stdout and "round 4 of 4" in result.stderr, (result.stdout, result.stderr)
    assert "per micro-batch size:\n  4 samples: 1: " in result.stdout and "\n  8 samples: 1: " in result.stdout, result.stdout
    with open(profile) as f:
        doc = json.load(f)
    assert doc["format"] == "gpipe-profile/1" and len(doc["layers"]) == 6
    assert [m["microbatch_size"] for m in doc["measurements"]] == [4, 8]
    # Co-located ranks probed at both sizes; the top level is the first size's.
    costs = doc["step_costs"]
    assert [b["microbatch_size"] for b in costs["by_microbatch_size"]] == [4, 8], costs
    assert all(len(b["compute_scale"]) == 2 for b in costs["by_microbatch_size"]), costs
    assert costs["compute_scale"] == costs["by_microbatch_size"][0]["compute_scale"], costs
    bad = sh([binary, "profile", "--model", MODEL, "--microbatch-size", "4,8", "--probe-sizes", "2", "-o", profile],
             check=False)
    assert bad.returncode != 0 and "--probe-sizes 2: not one of --microbatch-size 4,8" in bad.stderr, bad.stderr
    cluster = os.path.join(tmp, "cluster.json")
    result = sh([binary, "profile-links", "--ranks", "2", "--repeats", "3", "-o", cluster])
    with open(cluster) as f:
        links = json.load(f)
    assert links["devices"] == 2 and len(links["links"]) == 2 and links["device_memory_bytes"] > 0, links
    # How late a woken rank runs while every core computes: a distribution of wake-ups, in order.
    wakeup = links["saturated_wakeup"]
    assert wakeup["samples"] >= 100 and 0 <= wakeup["median_ms"] <= wakeup["p90_ms"] < 1000, wakeup
    assert 0 <= wakeup["mean_ms"] <= wakeup["p90_ms"] * 10 + 1, wakeup
    assert "a rank woken by its message while every core computes: " in result.stdout, result.stdout
    plan_path = os.path.join(tmp, "plan.json")
    sh([binary, "plan", "--profile", profile, "--cluster", cluster, "--global-batch", "24", "--stages", "2",
        "--microbatches", "4", "-o", plan_path])
    result = sh([binary, "simulate", plan_path])
    assert "interpolated linearly to micro-batches of 6 from the sizes the profile measured (4, 8)" in result.stdout, \
        result.stdout
    assert "interpolated between the probe's 4 and 8" in result.stdout, result.stdout
    # Two ranks on two cores: a waiting rank leaves a core free, so the wake-up term never applies.
    assert "saturated_wakeup" not in result.stdout, result.stdout
    # Four (K=2, D=2) on the profiled node that computes two at once: it does, and the note says so.
    four = os.path.join(tmp, "plan-four.json")
    sh([binary, "plan", "--profile", profile, "--cluster", cluster, "--devices", "4", "--global-batch", "24",
        "--stages", "2", "--replicas", "2", "--microbatches", "2", "-o", four])
    result = sh([binary, "simulate", four])
    assert "(the cluster's saturated_wakeup)" in result.stdout, result.stdout


def validate_compare_calibrate(binary, tmp):
    """The predicted-against-measured loop end to end on a small matrix: validate plans, runs,
    calibrates on one M and judges the other; compare and calibrate read what it kept. (The
    accuracy itself is measured on an idle machine, not asserted here: CI machines are noisy.)"""
    out_dir = os.path.join(tmp, "v")
    result = sh([binary, "validate", "--model", MODEL, "--cluster", CLUSTER, "--profile", PROFILE, "--global-batch", "16",
                 "--stages", "1,2", "--microbatches", "2,4", "--schedules", "gpipe", "--remat", "off",
                 "--calibrate-on", "2", "--steps", "3", "--rounds", "2", "--out-dir", out_dir, "--json"])
    doc = json.loads(result.stdout)
    assert [c["name"] for c in doc["configs"]] == ["k1-m2-gpipe", "k1-m4-gpipe", "k2-m2-gpipe", "k2-m4-gpipe"], doc
    assert [c["held_out"] for c in doc["configs"]] == [False, True, False, True]
    for c in doc["configs"]:
        assert c["predicted_ms"] > 0 and c["measured_ms"] > 0, c
        assert abs(c["error"] - (c["predicted_ms"] - c["measured_ms"]) / c["measured_ms"]) < 1e-9, c
        # judged on its fastest round of two, both kept
        assert len(c["round_ms"]) == 2 and abs(c["measured_ms"] - min(c["round_ms"])) < 1e-9, c
        assert os.path.exists(os.path.join(out_dir, c["name"] + ".round2.run.json")), c
    assert doc["held_out"] == 2 and 0 <= doc["median_abs_error"] <= doc["max_abs_error"], doc
    assert doc["planner_choice"]["measured_ms"] > 0, doc
    calibrated = os.path.join(out_dir, "calibrated-cluster.json")
    assert "calibration" in record(calibrated)
    # compare draws both timelines and names where they differ
    svg = os.path.join(tmp, "both.svg")
    result = sh([binary, "compare", os.path.join(out_dir, "k2-m4-gpipe.plan.json"),
                 os.path.join(out_dir, "k2-m4-gpipe.run.json"), "--cluster", calibrated, "--svg", svg])
    assert "where they differ" in result.stdout and "sim 1" in open(svg).read() and "run 1" in open(svg).read()
    # one convention per figure: compare's measured samples/s is the one run printed (the record's,
    # at the median step after the first), one rank has no bubble, errors are predicted - measured
    k1_record = os.path.join(out_dir, "k1-m4-gpipe.run.json")
    k1 = json.loads(sh([binary, "compare", os.path.join(out_dir, "k1-m4-gpipe.plan.json"), k1_record, "--json"]).stdout)
    measured = record(k1_record)["throughput_samples_per_s"]
    assert abs(k1["measured_throughput_samples_per_s"] - measured) <= 1e-9 * measured, (k1, measured)
    assert k1["measured_bubble_fraction"] == 0 and k1["predicted_bubble_fraction"] == 0, k1
    assert k1["measured_idle_fraction"] > 0, k1
    assert abs(k1["step_error"] - (k1["predicted_step_ms"] - k1["measured_step_ms"]) / k1["measured_step_ms"]) < 1e-9, k1
    # calibrate writes a cluster the planner accepts, and judges held-out runs
    again = os.path.join(tmp, "again.json")
    result = sh([binary, "calibrate", os.path.join(out_dir, "k1-m2-gpipe.run.json"),
                 os.path.join(out_dir, "k2-m2-gpipe.run.json"), "-o", again,
                 "--judge", os.path.join(out_dir, "k2-m4-gpipe.run.json")])
    assert "held out:" in result.stdout and "median |error|" in result.stdout, result.stdout
    sh([binary, "plan", "--profile", PROFILE, "--cluster", again, "--global-batch", "16"])


def gpt2_bf16(binary, tmp):
    """GPT-2 (transformers, traced) in mixed precision end to end: `profile --precision bf16`
    records bf16 and counts 2 bytes a parameter; `plan` keeps the profile's precision and refuses
    another; `run` executes it under autocast, the record says bf16, and every rank's peak memory
    is within 10% of the plan's prediction (K=1 and K=2). fp16 runs with its loss scale in the
    record and the progress lines."""
    os.environ["GPIPE_CACHE_DIR"] = os.path.join(tmp, "cache")
    model = gpt2_model_file(tmp, "gpt2-bf16")
    profiles = {"bf16": os.path.join(tmp, "profile-bf16.json"), "fp16": os.path.join(tmp, "profile-fp16.json")}
    sh([binary, "profile", "--model", model, "--precision", "bf16", "--microbatch-size", "4", "--warmup", "0",
        "--repeats", "1", "--ranks-per-node", "1", "-o", profiles["bf16"]], cwd=tmp)
    doc = record(profiles["bf16"])
    with open(profiles["fp16"], "w") as f:  # the same sizes; fp16's CPU kernels are too slow to profile here
        json.dump(dict(doc, dtype="fp16"), f)
    assert doc["dtype"] == "bf16", doc["dtype"]
    ties = doc.get("tied_parameters", [])
    assert len(ties) == 1 and ties[0]["bytes"] == 96 * 128 * 2, ties  # the tied embedding, 2 bytes a parameter
    refused = sh([binary, "plan", "--profile", profiles["bf16"], "--cluster", CLUSTER, "--global-batch", "16",
                  "--precision", "fp32"], check=False)
    assert refused.returncode == 1 and "--precision fp32: " in refused.stderr and "was measured in bf16" in refused.stderr \
        and "gpipe-plan profile --precision fp32" in refused.stderr, refused.stderr
    for k in (1, 2):
        p = os.path.join(tmp, f"plan-bf16-k{k}.json")
        sh([binary, "plan", "--profile", profiles["bf16"], "--cluster", CLUSTER, "--global-batch", "16", "--stages", str(k),
            "--replicas", "1", "--microbatches", "4", "--schedule", "1f1b", "--remat", "off", "--precision", "bf16",
            "-o", p, "-q"], cwd=tmp)
        planned = record(p)
        assert planned["precision"] == "bf16" and planned["optimizer"] == "adam-mixed", planned
        out = os.path.join(tmp, f"run-bf16-k{k}.json")
        sh([binary, "run", p, "--model", model, "--steps", "2", "--record", out], cwd=tmp)
        ran = record(out)
        assert ran["precision"] == "bf16", ran["precision"]
        predicted = [r["peak_memory_bytes"] for r in planned["prediction"]["ranks"]]
        measured = [r["peak_memory_bytes"] for r in ran["ranks"]]
        errors = [a / b - 1 for a, b in zip(predicted, measured)]
        assert len(errors) == k and all(abs(e) < 0.10 for e in errors), (k, predicted, measured, errors)
    p = os.path.join(tmp, "plan-fp16.json")
    sh([binary, "plan", "--profile", profiles["fp16"], "--cluster", CLUSTER, "--global-batch", "8", "--stages", "2",
        "--replicas", "1", "--microbatches", "2", "--schedule", "1f1b", "-o", p, "-q"], cwd=tmp)
    out = os.path.join(tmp, "run-fp16.json")
    result = sh([binary, "run", p, "--model", model, "--steps", "2", "--record", out], cwd=tmp)
    assert "loss scale 65536" in result.stdout, result.stdout
    steps = record(out)["steps"]
    assert [s["loss_scale"] for s in steps] == [65536, 65536] and not any(s.get("skipped") for s in steps), steps


CASES = {f.__name__: f for f in [inplace_first_layer, resnet18_torchvision, bad_scripted_layers, gpt2_transformers, gpt2_recipe_tied_clip, gpt2_weights_to_pytorch, llama_weights_to_pytorch, user_token_data, npy_images, gpt2_bf16,
                                  llama_tuple_boundaries, bad_python_models, first_failure_named, two_ranks_record, replicas_over_gloo, sharded_optimizer_over_gloo, tensor_parallel_refused, two_nodes_loopback, resume_equals_uninterrupted,
                                  resume_other_plan_refused, checkpoint_disk_full, rank_killed, interrupted_launcher, rendezvous_on_loopback, bad_input,
                                  torchscript_model, profile_then_plan, validate_compare_calibrate]}

if __name__ == "__main__":
    binary, case = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        CASES[case](os.path.abspath(binary), tmp)
    print(f"{case}: ok")
