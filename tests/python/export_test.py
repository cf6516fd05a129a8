#!/usr/bin/env python3
"""Tests executor/export_model.py as the executor runs it: `python3 -c <its text> ARGS...`.

  python3 tests/python/export_test.py

Exports GPT-2, Llama (tuple boundaries) and ResNet-18 (in-place ReLUs) from models/examples and checks
the files: layer count, gpipe.json (ties, tuple outputs, dtypes), in-place ReLUs kept, and that the
loaded layers run in sequence give the eager model's loss and parameter gradients on the same batch
(the grads of tied parameters summed). Then the models of tests/python/bad_models.py and a missing
function / file: exit 1 and one stderr line "gpipe-export: ..." naming the problem.
Needs torch, torchvision and transformers (scripts/deps.sh install_test_models). Exits non-zero on the
first failure. All exports run at once (about 30 s on two cores).
"""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPORTER = os.path.join(ROOT, "executor", "export_model.py")
EXAMPLES = os.path.join(ROOT, "models", "examples")
BAD = os.path.join(ROOT, "tests", "python", "bad_models.py")
TOKENS = {"kind": "tokens", "vocab": 96, "seq_len": 64}
IMAGES = {"kind": "images", "channels": 3, "height": 32, "width": 32, "classes": 10}
SEED = 1234


def fail(message):
    print("FAIL: " + message, file=sys.stderr)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)


def start(source, function, out, spec, seed=SEED):
    with open(EXPORTER) as f:
        text = f.read()
    cmd = [sys.executable, "-c", text, "--source", source, "--function", function, "--out", out,
           "--input", json.dumps(spec), "--seed", str(seed)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def import_file(path):
    name = "builder_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(path))
    spec.loader.exec_module(module)
    return module


def as_tuple(v):
    return v if isinstance(v, tuple) else (v,)


def run_chain(layers, x):
    v = (x,)
    for layer in layers:
        v = as_tuple(layer(*v))
    return v


def batch(spec, mb):
    torch.manual_seed(99)
    if spec["kind"] == "tokens":
        x = torch.randint(0, spec["vocab"], (mb, spec["seq_len"]))
        return x, torch.randint(0, spec["vocab"], (mb, spec["seq_len"]))
    x = torch.randn(mb, spec["channels"], spec["height"], spec["width"])
    return x, torch.randint(0, spec["classes"], (mb,))


def loss_of(outputs, target):
    logits = outputs[0]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def check_causal(model, path):
    """Logits at positions <= t do not change when the tokens after t change (no mask is given)."""
    layers = [l for _, l in torch.jit.load(path).named_children()]
    x, _ = batch(TOKENS, 2)
    t = 40
    y = x.clone()
    y[:, t + 1:] = (x[:, t + 1:] + 1) % TOKENS["vocab"]
    with torch.no_grad():
        a, b = run_chain(layers, x)[0], run_chain(layers, y)[0]
    check(torch.allclose(a[:, :t + 1], b[:, :t + 1], rtol=1e-5, atol=1e-6), "%s: attention is not causal" % model)
    check(not torch.allclose(a[:, t + 1:], b[:, t + 1:]), "%s: later tokens change nothing" % model)
    print("  %s: causal (logits up to position %d unchanged when later tokens change)" % (model, t))


def check_equivalent(model, path, spec, meta):
    """Loaded layers in sequence vs the eager model (built here with the same seed): weights, loss and
    parameter gradients. Returns whether tied parameters came back as one tensor."""
    torch.manual_seed(SEED)
    eager = import_file(os.path.join(EXAMPLES, model + ".py")).build()
    eager.train()
    loaded = torch.jit.load(path)
    loaded.train()
    e_layers = [m for _, m in eager.named_children()]
    l_layers = [m for _, m in loaded.named_children()]
    check(len(e_layers) == len(l_layers), "%s: %d layers loaded, %d eager" % (model, len(l_layers), len(e_layers)))
    for i, (e, l) in enumerate(zip(e_layers, l_layers)):
        lp = dict(l.named_parameters())
        for name, p in e.named_parameters():
            check(name in lp and torch.equal(lp[name], p), "%s: layer %d parameter %s differs" % (model, i, name))
        lb = dict(l.named_buffers())
        for name, b in e.named_buffers():
            if name in lb:  # non-persistent buffers too: TorchScript keeps every attribute
                check(torch.equal(lb[name], b), "%s: layer %d buffer %s differs from its initial value"
                      % (model, i, name))

    x, target = batch(spec, 4)  # another micro-batch size than the trace's
    e_loss = loss_of(run_chain(e_layers, x), target)
    e_loss.backward()
    l_loss = loss_of(run_chain(l_layers, x), target)
    l_loss.backward()
    check(torch.allclose(e_loss, l_loss, rtol=1e-5, atol=1e-6),
          "%s: loss %.7f loaded, %.7f eager" % (model, l_loss.item(), e_loss.item()))

    # Re-tie as the executor does: the grads of one tie summed (once if the tensor is shared).
    grads = {(i, n): p.grad for i, l in enumerate(l_layers) for n, p in l.named_parameters()}
    shared = True
    for tie in meta["ties"]:
        params = [dict(l_layers[i].named_parameters())[n] for i, n in zip(tie["layers"], tie["names"])]
        one = all(p is params[0] and p.data_ptr() == params[0].data_ptr() for p in params)
        shared = shared and one
        total = params[0].grad if one else sum(p.grad for p in params)
        for key in zip(tie["layers"], tie["names"]):
            grads[key] = total
    for i, e in enumerate(e_layers):
        for n, p in e.named_parameters():
            g = grads[(i, n)]
            check(g is not None, "%s: layer %d parameter %s has no gradient loaded" % (model, i, n))
            check(torch.allclose(p.grad, g, rtol=1e-4, atol=1e-6),
                  "%s: layer %d parameter %s: gradient differs by %.3g" % (model, i, n, (p.grad - g).abs().max()))
    print("  %s: loss %.6f equal, %d parameter gradients equal" % (model, l_loss.item(), len(grads)))
    return shared


def main():
    t0 = time.time()
    tmp = tempfile.mkdtemp(prefix="gpipe-export-test-")
    good = {"gpt2": TOKENS, "llama": TOKENS, "resnet18": IMAGES}
    small = {"kind": "tokens", "vocab": 96, "seq_len": 8}
    bad = {  # function -> what the one line names
        "extra_argument": ["layer 1 (1: NeedsMask)", "1 tensor (float32 [2, 8, 8])", "mask"],
        "returns_none": ["layer 1 (1: ReturnsNone)", "returned None", "a tensor or a tuple of tensors"],
        "not_a_module": ["not_a_module: returned a list, not a torch.nn.Module"],
        "no_such_function": ["has no function 'no_such_function'"],
        "batch_size_baked_in": ["the trace of layer 2 (2: BatchOfTwo) does not generalise to another batch size"],
    }
    runs = {m: start(os.path.join(EXAMPLES, m + ".py"), "build", os.path.join(tmp, m + ".pt"), s)
            for m, s in good.items()}
    for f in bad:
        runs[f] = start(BAD, f, os.path.join(tmp, f + ".pt"), small)
    runs["list_outputs"] = start(BAD, "list_outputs", os.path.join(tmp, "list_outputs.pt"), small)
    missing = os.path.join(tmp, "missing.py")
    runs["missing_file"] = start(missing, "build", os.path.join(tmp, "missing.pt"), small)
    bad["missing_file"] = [missing + ":build", "no such file"]
    results = {k: p.communicate() + (p.returncode,) for k, p in runs.items()}
    print("exports ran in %.1f s" % (time.time() - t0))

    metas = {}
    for m in good:
        out, err, rc = results[m]
        check(rc == 0, "%s: exit %d, stderr: %s" % (m, rc, err.strip()))
        check(err == "", "%s: stderr on success: %r" % (m, err[:500]))
        check(out.count("\n") <= 1, "%s: more than one line on stdout: %r" % (m, out[:500]))
        path = os.path.join(tmp, m + ".pt")
        check(os.path.exists(path) and not os.path.exists(path + ".tmp"), "%s: no %s (or a .tmp left)" % (m, path))
        extra = {"gpipe.json": ""}
        loaded = torch.jit.load(path, _extra_files=extra)
        meta = metas[m] = json.loads(extra["gpipe.json"])
        check(meta["format"] == "gpipe-export/1", "%s: format %r" % (m, meta["format"]))
        names = [n for n, _ in loaded.named_children()]
        check(names == [l["name"] for l in meta["layers"]], "%s: children %s vs gpipe.json" % (m, names))
        print("  %s: %s" % (m, out.strip()))

    gpt2 = metas["gpt2"]
    check(len(gpt2["layers"]) == 6, "gpt2: %d layers, expected 6" % len(gpt2["layers"]))
    check(gpt2["ties"] == [{"layers": [0, 5], "names": ["wte.weight", "lm_head.weight"], "bytes": 96 * 128 * 4}],
          "gpt2: ties %s" % gpt2["ties"])
    llama = metas["llama"]
    for i, l in enumerate(llama["layers"]):
        check(l["inputs"] == (1 if i == 0 else 4), "llama: layer %d takes %d tensors" % (i, l["inputs"]))
        last = i == len(llama["layers"]) - 1
        check(l["outputs"] == (1 if last else 4), "llama: layer %d returns %d tensors" % (i, l["outputs"]))
        if not last:
            check(l["output_dtypes"] == ["float32", "float32", "float32", "int64"],
                  "llama: layer %d output dtypes %s" % (i, l["output_dtypes"]))
    check(llama["ties"] == [], "llama: ties %s" % llama["ties"])
    resnet = torch.jit.load(os.path.join(tmp, "resnet18.pt"))
    relus = 0
    for (name, layer), info in zip(resnet.named_children(), metas["resnet18"]["layers"]):
        graph = str(layer.inlined_graph)
        check("aten::relu(" not in graph, "resnet18: layer %s has an out-of-place relu" % name)
        relus += graph.count("aten::relu_(")
    check(relus == 17, "resnet18: %d in-place relus in the traced layers, expected 17" % relus)
    print("  resnet18: %d aten::relu_ (in place), no aten::relu" % relus)

    for m in ("gpt2", "llama"):
        check_causal(m, os.path.join(tmp, m + ".pt"))

    out, err, rc = results["list_outputs"]
    check(rc == 0, "list_outputs: exit %d, stderr: %s" % (rc, err.strip()))
    extra = {"gpipe.json": ""}
    layers = [l for _, l in torch.jit.load(os.path.join(tmp, "list_outputs.pt"), _extra_files=extra).named_children()]
    check(json.loads(extra["gpipe.json"])["layers"][1]["outputs"] == 2, "list_outputs: layer 1 does not return 2")
    v = layers[1](layers[0](torch.randint(0, 96, (3, 8))))
    check(isinstance(v, tuple) and len(v) == 2, "list_outputs: layer 1 returns %s, not a tuple" % type(v).__name__)
    print("  list_outputs: a layer's list of tensors is exported as a tuple")

    shared = {m: check_equivalent(m, os.path.join(tmp, m + ".pt"), good[m], metas[m]) for m in good}
    print("  tied parameters after torch.jit.load: %s" % ("one tensor (same object, one .grad)"
                                                           if shared["gpt2"] else "separate tensors"))

    for f, expected in bad.items():
        out, err, rc = results[f]
        check(rc == 1, "%s: exit %d, expected 1 (stderr: %s)" % (f, rc, err.strip()))
        lines = err.splitlines()
        check(len(lines) == 1 and lines[0].startswith("gpipe-export: "), "%s: stderr is not one line: %r" % (f, err))
        check("Traceback" not in err, "%s: a traceback: %r" % (f, err))
        for e in expected:
            check(e in lines[0], "%s: %r does not name %r" % (f, lines[0], e))
        check(not os.path.exists(os.path.join(tmp, f + ".pt")), "%s: an output file was written" % f)
        print("  %s: %s" % (f, lines[0]))

    for name in os.listdir(tmp):
        os.remove(os.path.join(tmp, name))
    os.rmdir(tmp)
    print("export_test: all passed in %.1f s" % (time.time() - t0))


if __name__ == "__main__":
    main()
