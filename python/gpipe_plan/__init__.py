"""gpipe_plan: the gpipe-plan planner and simulator from Python.

The functions call the C++ core that the `gpipe-plan` command calls (gpipe_plan._core), so they give
the same answers; what they return is the JSON the command prints, as dicts. Profiles, clusters and
plans are dicts or paths to their files.

    import gpipe_plan
    best = gpipe_plan.plan("profiles/gpt3-13b-a100-80gb.json", "profiles/clusters/a100-80gb-8.json",
                           global_batch=512, schedule="1f1b")
    print(best["prediction"]["step_time_ms"], best["prediction"]["gap"])
    print(gpipe_plan.simulate(best)["bubble_fraction"])
    print(gpipe_plan.export(best, "megatron-layout"))

Errors are gpipe_plan.Error (a RuntimeError: a file is wrong, the work failed) or
gpipe_plan.UsageError (a ValueError: an argument is wrong), with the command's one-line message.
gpipe_plan.torch trains a plan in PyTorch's own pipeline runtime (torch.distributed.pipelining).
"""
import importlib
import json
import os

__all__ = ["Error", "UsageError", "load_profile", "load_cluster", "plan", "simulate", "export"]


def _lib():
    """The compiled core (imported on first use, so that gpipe_plan.torch also runs from a source tree)."""
    try:
        return importlib.import_module("._core", __name__)
    except ImportError as e:
        raise ImportError("gpipe_plan's compiled core is not installed: `pip install .` in the gpipe-plan checkout "
                          f"builds it (README.md) ({e})") from e


def __getattr__(name):
    if name in ("Error", "UsageError"):
        return getattr(_lib(), name)
    raise AttributeError(f"module 'gpipe_plan' has no attribute {name!r}")


def _source(value, what):
    """(text, is_path) for the core: a dict as JSON text, a path as itself."""
    if isinstance(value, dict):
        return json.dumps(value), False
    if isinstance(value, (str, os.PathLike)):
        return os.fspath(value), True
    raise TypeError(f"{what}: a dict or a path to a {what} file, got {type(value).__name__}")


def load_profile(source):
    """A gpipe-profile/1 profile (dict or path), checked as `plan` checks it, as a dict."""
    return json.loads(_lib().profile(*_source(source, "profile")))


def load_cluster(source):
    """A gpipe-cluster/1 cluster (dict or path), checked as `plan` checks it, as a dict."""
    return json.loads(_lib().cluster(*_source(source, "cluster")))


def plan(profile, cluster, global_batch, **options):
    """The fastest plan that fits, as `gpipe-plan plan --json` prints it.

    `options` are plan's flags with underscores: devices, memory ("80GB"), stages, replicas,
    microbatches, schedule, chunks, remat, placement, tensor_parallel, sharded_optimizer,
    optimizer, precision, oversubscribe, max_nodes, time_limit (seconds; 0: none), gap.
    When nothing fits, the dict is the report of what would ({"fits": False, ...}).
    """
    options = dict(options, global_batch=global_batch)
    return json.loads(_lib().plan(*_source(profile, "profile"), *_source(cluster, "cluster"), json.dumps(options)))


def simulate(plan):
    """A plan's predicted step (dict, e.g. what plan() returned, or path), as `simulate --json` prints it."""
    return json.loads(_lib().simulate(*_source(plan, "plan")))


def export(plan, format="pytorch-csv", with_communication=False):
    """A plan as another tool's input, as `export --format FORMAT` writes it: "pytorch-csv" (PyTorch's
    schedule CSV) or "megatron-layout" (Megatron-LM's flags)."""
    return _lib().export(*_source(plan, "plan"), format, bool(with_communication))
