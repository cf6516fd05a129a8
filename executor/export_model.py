"""gpipe-export: turns a user's Python model into the TorchScript file the executor loads.

  python3 export_model.py --source gpt2.py --function build --out model.pt \
      --input '{"kind": "tokens", "vocab": 96, "seq_len": 64}' --seed 1234 [--microbatch 2]

The C++ binary embeds this file's text and runs it as `python3 -c <text> ARGS...`, so it is one
self-contained file that depends only on torch (no __file__, no relative imports).

The function (called with no arguments, after torch.manual_seed(--seed)) returns an nn.Sequential,
or any nn.Module whose named_children() in order are the pipeline's layers. Each child is called with
the previous child's outputs as positional tensors (the first with the batch: int64 tokens
(mb, seq_len) or float images (mb, c, h, w)) and returns a tensor or a tuple of tensors. Each child
is traced (torch.jit.trace, train mode) on an example micro-batch; the traced chain is checked
against the eager one on another batch size. The file written holds a scripted container whose
attributes, in order, are the traced children under the Sequential's names, and an extra file
gpipe.json:
  {"format": "gpipe-export/1",
   "ties": [{"layers": [i, j], "names": [name in child i, name in child j], "bytes": n}],
   "layers": [{"name", "type", "inputs", "outputs", "input_dtypes", "output_dtypes", "transient_buffers"}]}
A tie is one parameter object held by more than one child (GPT-2's wte.weight and lm_head.weight).

Exit 0 and one summary line on stdout on success; on failure one line on stderr starting with
"gpipe-export: " and exit 1.
"""
import argparse
import contextlib
import importlib.util
import io
import json
import os
import sys
import warnings

FORMAT = "gpipe-export/1"


class ExportError(Exception):
    pass


def one_line(exc):
    """The exception's type and the first non-empty line of its message."""
    lines = [l.strip() for l in str(exc).splitlines() if l.strip()]
    text = lines[0] if lines else ""
    if len(text) > 400:
        text = text[:400] + "..."
    return type(exc).__name__ + (": " + text if text else "")


def describe_tensors(xs):
    return "%d tensor%s (%s)" % (len(xs), "" if len(xs) == 1 else "s",
                                 ", ".join("%s %s" % (dtype_name(x.dtype), list(x.shape)) for x in xs))


def layer_name(i, name, child):
    return "layer %d (%s: %s)" % (i, name, type(child).__name__)


def dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def describe_value(v):
    import torch
    if v is None:
        return "None"
    if isinstance(v, dict):
        return "a %s (a dict with keys %s)" % (type(v).__name__, list(v.keys())[:6])
    if isinstance(v, (tuple, list)):
        if not v:
            return "an empty %s" % type(v).__name__
        for k, e in enumerate(v):
            if not isinstance(e, torch.Tensor):
                return "a %s whose element %d is %s" % (type(v).__name__, k,
                                                        "None" if e is None else "a " + type(e).__name__)
    return "a " + type(v).__name__


def as_outputs(value, where):
    """A child's output as a tuple of tensors, or an ExportError."""
    import torch
    if isinstance(value, torch.Tensor):
        return (value,)
    if type(value) in (tuple, list) and value and all(isinstance(e, torch.Tensor) for e in value):
        return tuple(value)
    raise ExportError("%s returned %s; each child returns a tensor or a tuple of tensors"
                      % (where, describe_value(value)))


def example_batch(spec, mb):
    import torch
    if not isinstance(spec, dict):
        raise ExportError("--input is not a JSON object")
    kind = spec.get("kind")
    try:
        if kind == "tokens":
            return torch.randint(0, int(spec["vocab"]), (mb, int(spec["seq_len"])), dtype=torch.int64)
        if kind == "images":
            return torch.randn(mb, int(spec["channels"]), int(spec["height"]), int(spec["width"]))
    except KeyError as e:
        raise ExportError("--input of kind %r lacks %s" % (kind, e))
    raise ExportError("--input kind is %r; expected \"tokens\" or \"images\"" % (kind,))


def load_function(source, function):
    if not os.path.isfile(source):
        raise ExportError("no such file")
    folder = os.path.dirname(os.path.abspath(source))
    sys.path.insert(0, folder)
    name = os.path.splitext(os.path.basename(source))[0]
    spec = importlib.util.spec_from_file_location(name, os.path.abspath(source))
    if spec is None or spec.loader is None:
        raise ExportError("cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        raise ExportError("importing it failed: " + one_line(e))
    fn = getattr(module, function, None)
    if fn is None:
        raise ExportError("has no function %r" % function)
    if not callable(fn):
        raise ExportError("%r is a %s, not a function" % (function, type(fn).__name__))
    return fn


def tuple_output_module(child):
    """A module with the child's own parameters, buffers and submodules (the same names), whose
    forward returns the child's list of tensors as a tuple (TorchScript would keep a list)."""
    import torch

    class TupleOutput(torch.nn.Module):
        def forward(self, *xs):
            return tuple(child(*xs))

    m = TupleOutput()
    m._parameters, m._buffers, m._modules = child._parameters, child._buffers, child._modules
    m.training = child.training
    return m


def trace_chain(children, x, fail):
    """Traces each child on clones of the previous child's outputs. Returns (traced, layer info)."""
    import torch
    traced, infos, tracer_notes = [], [], []
    inputs = (x,)
    for i, (name, child) in enumerate(children):
        where = layer_name(i, name, child)
        try:
            value = child(*[t.clone() for t in inputs])
        except Exception as e:
            fail("%s failed when called with %s: %s" % (where, describe_tensors(inputs), one_line(e)))
        outputs = as_outputs(value, where)
        module = tuple_output_module(child) if isinstance(value, list) else child
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                clones = tuple(t.clone() for t in inputs)
                t = torch.jit.trace(module, clones[0] if len(clones) == 1 else clones, check_trace=False)
            except Exception as e:
                fail("tracing %s failed: %s" % (where, one_line(e)))
        notes = [str(w.message).splitlines()[0] for w in caught if "Tracer" in w.category.__name__]
        tracer_notes.append(notes)
        traced.append(t)
        infos.append({"name": name, "type": type(child).__name__, "inputs": len(inputs),
                      "outputs": len(outputs), "input_dtypes": [dtype_name(v.dtype) for v in inputs],
                      "output_dtypes": [dtype_name(v.dtype) for v in outputs],
                      # Buffers the child's state_dict leaves out (registered persistent=False, as
                      # Llama's rotary inv_freq): weights files (run --save-weights) leave them out too.
                      "transient_buffers": sorted({n for n, _ in child.named_buffers()} - set(child.state_dict()))})
        inputs = tuple(v.detach() for v in outputs)
    return traced, infos, tracer_notes


def same(a, b):
    import torch
    if a.shape != b.shape:
        return "shape %s, eager %s" % (list(b.shape), list(a.shape))
    if a.dtype != b.dtype:
        return "dtype %s, eager %s" % (dtype_name(b.dtype), dtype_name(a.dtype))
    if a.is_floating_point() or a.is_complex():
        ok = torch.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True)
    else:
        ok = torch.equal(a, b)
    if ok:
        return None
    diff = (a.double() - b.double()).abs().max().item()
    return "values differ (largest difference %.3g)" % diff


def check_generalises(children, traced, spec, mb, seed, tracer_notes, fail):
    """Each traced child, given the eager chain's inputs for micro-batch mb + 1, gives the eager
    child's outputs (the same seed before each, so that dropout draws the same masks)."""
    import torch
    torch.manual_seed(seed)
    inputs = (example_batch(spec, mb + 1),)
    for i, ((name, child), t) in enumerate(zip(children, traced)):
        def problem(what):
            note = " (tracer warning: %s)" % tracer_notes[i][0] if tracer_notes[i] else ""
            fail("the trace of %s does not generalise to another batch size: %s%s"
                 % (layer_name(i, name, child), what, note))
        torch.manual_seed(seed + i)
        try:
            eager = as_outputs(child(*[v.clone() for v in inputs]), layer_name(i, name, child))
        except ExportError:
            raise
        except Exception as e:
            problem("the eager layer fails on %s: %s" % (describe_tensors(inputs), one_line(e)))
        torch.manual_seed(seed + i)
        try:
            got = t(*[v.clone() for v in inputs])
        except Exception as e:
            problem("it fails on %s: %s" % (describe_tensors(inputs), one_line(e)))
        got = got if isinstance(got, tuple) else (got,)
        if len(got) != len(eager):
            problem("it gives %d outputs, the eager layer %d" % (len(got), len(eager)))
        for k, (a, b) in enumerate(zip(eager, got)):
            d = same(a, b) if isinstance(b, torch.Tensor) else "a %s" % type(b).__name__
            if d:
                problem("output %d: %s" % (k, d))
        inputs = tuple(v.detach() for v in eager)


def find_ties(children, traced, fail):
    holders = {}  # id(parameter) -> (parameter, [(layer, name)])
    for i, (_, child) in enumerate(children):
        for pname, p in child.named_parameters(remove_duplicate=False):
            entry = holders.setdefault(id(p), (p, []))[1]
            if all(layer != i for layer, _ in entry):
                entry.append((i, pname))
    ties = []
    for p, entry in holders.values():
        if len(entry) < 2:
            continue
        for layer, pname in entry:
            if pname not in dict(traced[layer].named_parameters()):
                fail("%s: the traced layer has no parameter %r (tied with another layer)"
                     % (layer_name(layer, *children[layer]), pname))
        ties.append({"layers": [l for l, _ in entry], "names": [n for _, n in entry],
                     "bytes": p.numel() * p.element_size()})
    return ties


def export(args, fail):
    import torch
    try:
        spec = json.loads(args.input)
    except ValueError as e:
        raise ExportError("--input is not JSON: %s" % e)
    if args.microbatch < 1:
        raise ExportError("--microbatch must be at least 1")
    example_batch(spec, 1)  # a bad --input fails before the user's file is imported
    fn = load_function(args.source, args.function)
    torch.manual_seed(args.seed)
    try:
        model = fn()
    except Exception as e:
        raise ExportError("calling it failed: " + one_line(e))
    if not isinstance(model, torch.nn.Module):
        raise ExportError("returned %s, not a torch.nn.Module (an nn.Sequential of the layers)"
                          % ("None" if model is None else "a " + type(model).__name__))
    children = list(model.named_children())
    if not children:
        raise ExportError("returned a %s without children; its children are the layers"
                          % type(model).__name__)
    own = [n for n, _ in model.named_parameters(recurse=False)]
    if own:
        raise ExportError("returned a %s with parameters of its own (%s), outside the layers"
                          % (type(model).__name__, ", ".join(own)))
    model.train()
    # The runs below update buffers (BatchNorm's running statistics); the file keeps the initial ones.
    initial = {k: v.detach().clone() for k, v in model.named_buffers()}

    torch.manual_seed(args.seed)
    x = example_batch(spec, args.microbatch)
    traced, infos, notes = trace_chain(children, x, fail)
    check_generalises(children, traced, spec, args.microbatch, args.seed, notes, fail)
    ties = find_ties(children, traced, fail)
    with torch.no_grad():
        for k, v in model.named_buffers():
            v.copy_(initial[k])

    # A plain nn.Module (no forward: nothing of it to compile, and under `python3 -c` there is no
    # source to compile from) holding the traced layers; its trivial forward is defined from text.
    container = torch.nn.Module()
    for (name, _), t in zip(children, traced):
        container.add_module(name, t)
    try:
        scripted = torch.jit.script(container)
        scripted.define("def forward(self, x: Tensor) -> Tensor:\n    return x\n")
    except Exception as e:
        raise ExportError("scripting the container of the traced layers failed: " + one_line(e))
    meta = json.dumps({"format": FORMAT, "ties": ties, "layers": infos})
    tmp = args.out + ".tmp"
    try:
        torch.jit.save(scripted, tmp, _extra_files={"gpipe.json": meta})
        extra = {"gpipe.json": ""}
        loaded = torch.jit.load(tmp, _extra_files=extra)
    except Exception as e:
        raise ExportError("writing %s failed: %s" % (tmp, one_line(e)))
    names = [n for n, _ in loaded.named_children()]
    if names != [n for n, _ in children]:
        raise ExportError("%s read back has layers %s, expected %s" % (tmp, names, [n for n, _ in children]))
    if json.loads(extra["gpipe.json"]) != json.loads(meta):
        raise ExportError("%s read back has another gpipe.json" % tmp)
    layers = [m for _, m in loaded.named_children()]
    for tie in ties:
        for layer, pname in zip(tie["layers"], tie["names"]):
            if pname not in dict(layers[layer].named_parameters()):
                raise ExportError("%s read back: layer %d has no parameter %r" % (tmp, layer, pname))
    os.replace(tmp, args.out)
    return len(children), ties


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ExportError("usage: " + message)


def main(argv):
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    ap = Parser(prog="export_model", description="Exports a Python model to TorchScript for gpipe.")
    ap.add_argument("--source", required=True, help="the user's Python file")
    ap.add_argument("--function", required=True, help="function in it that returns the model")
    ap.add_argument("--out", required=True, help="TorchScript file to write")
    ap.add_argument("--input", required=True, help="the model's input spec (JSON)")
    ap.add_argument("--seed", type=int, default=0, help="torch.manual_seed before calling the function")
    ap.add_argument("--microbatch", type=int, default=2, help="example micro-batch size for tracing")
    args = None
    real_err = sys.stderr
    captured = io.StringIO()  # what the user's code prints (and warnings) stays out of our output

    def fail(cause):
        raise ExportError(cause)

    try:
        args = ap.parse_args(argv)
        with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            n, ties = export(args, fail)
    except BaseException as e:  # noqa: B902 -- one line, never a traceback
        if isinstance(e, SystemExit) and e.code in (0, None):
            raise
        where = "%s:%s: " % (args.source, args.function) if args else ""
        if args and os.path.exists(args.out + ".tmp"):
            os.remove(args.out + ".tmp")
        cause = str(e) if isinstance(e, ExportError) else "internal error: " + one_line(e)
        cause = " ".join(cause.split("\n"))
        real_err.write("gpipe-export: %s%s\n" % (where, cause))
        real_err.flush()
        os._exit(1)  # no interpreter teardown output (atexit handlers of the user's imports)
    print("gpipe-export: %s:%s: %d layers, %d tie%s -> %s"
          % (args.source, args.function, n, len(ties), "" if len(ties) == 1 else "s", args.out))


if __name__ == "__main__":
    main(sys.argv[1:])
