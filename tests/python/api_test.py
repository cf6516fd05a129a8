"""The Python API gives the CLI's answers: run with the installed package's interpreter.

    python tests/python/api_test.py GPIPE_PLAN_BINARY

For shipped profiles, plans and both export formats, gpipe_plan.plan / simulate / export return what
`gpipe-plan plan --json`, `simulate --json` and `export` print (the same C++ underneath), and
errors arrive as gpipe_plan.UsageError / gpipe_plan.Error with the CLI's one-line message.
Exits non-zero on the first difference, naming it.
"""
import json
import os
import subprocess
import sys
import tempfile

import gpipe_plan

SOURCE = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PROFILES = os.path.join(SOURCE, "profiles")
FAILURES = []


def cli(binary, *args, expect=0):
    done = subprocess.run([binary, *args], capture_output=True, text=True, cwd=SOURCE)
    if done.returncode != expect:
        raise SystemExit(f"{' '.join(args)}: exit {done.returncode}, expected {expect}\n{done.stderr}")
    return done


def same_as_cli(name, binary, call, args, parse, file_given_as_dict=None):
    """call() against `gpipe-plan ARGS`: the same output, or, where the command fails, the same line
    in a gpipe_plan.Error (UsageError where the command's exit code is 2); where the call was given
    a dict for the command's file `file_given_as_dict`, the line without that file's name."""
    done = subprocess.run([binary, *args], capture_output=True, text=True, cwd=SOURCE)
    try:
        got = call()
    except (gpipe_plan.Error, gpipe_plan.UsageError) as e:
        usage = isinstance(e, gpipe_plan.UsageError)
        want = (done.returncode, done.stderr.splitlines()[0] if done.stderr else "")
        if file_given_as_dict:
            want = (want[0], want[1].replace(file_given_as_dict + ": ", "", 1))
        check(name, (2 if usage else 1, f"gpipe-plan {args[0]}: {e}"), want)
        return
    check(name, (0, got), (done.returncode, parse(done.stdout) if done.returncode == 0 else done.stderr))


def check(name, got, want):
    if got != want:
        FAILURES.append(name)
        print(f"DIFFERS  {name}")
    else:
        print(f"same     {name}")


def main():
    binary = sys.argv[1]
    # plan: search to the end (no time limit), so that the answer cannot depend on speed.
    cases = [
        ("tiny-gpt on 2 CPU ranks", "tiny-gpt-cpu.json", "clusters/cpu-2.json", 64, {}),
        ("GPT-3 13B on 8 A100s, 1f1b", "gpt3-13b-a100-80gb.json", "clusters/a100-80gb-8.json", 512, {"schedule": "1f1b"}),
        ("BERT-Large on 8 H100s, 4 stages", "bert-large-h100-80gb.json", "clusters/h100-80gb-8.json", 256,
         {"stages": 4, "remat": "stages"}),
        ("GPT-2 1.5B on 1 stage at 2 GB, nothing fits", "gpt2-1.5b-h100-80gb.json", "clusters/h100-80gb-8.json", 512,
         {"memory": "2GB", "stages": 1}),
    ]
    for name, profile, cluster, batch, options in cases:
        flags = []
        for key, value in options.items():
            flags += ["--" + key.replace("_", "-"), str(value)]
        profile_path, cluster_path = os.path.join(PROFILES, profile), os.path.join(PROFILES, cluster)
        fits = "memory" not in options
        want = json.loads(cli(binary, "plan", "--profile", profile_path, "--cluster", cluster_path, "--global-batch",
                              str(batch), "--time-limit", "0", "--json", "-q", *flags, expect=0 if fits else 1).stdout)
        got = gpipe_plan.plan(profile_path, cluster_path, batch, time_limit=0, **options)
        check(f"plan: {name}", got, want)
        # The same from dicts.
        got = gpipe_plan.plan(gpipe_plan.load_profile(profile_path), gpipe_plan.load_cluster(cluster_path), batch,
                              time_limit=0, **options)
        check(f"plan from dicts: {name}", got, want)
        if fits:
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "plan.json")
                with open(path, "w") as f:
                    json.dump(got, f)
                same_as_cli(f"simulate the plan: {name}", binary, lambda: gpipe_plan.simulate(got),
                            ["simulate", path, "--json"], json.loads, file_given_as_dict=path)
                for fmt in ("pytorch-csv", "megatron-layout"):
                    same_as_cli(f"export {fmt}: {name}", binary, lambda: gpipe_plan.export(got, fmt),
                                ["export", path, "--format", fmt], str, file_given_as_dict=path)
    for plan in sorted(os.listdir(os.path.join(PROFILES, "plans"))):
        path = os.path.join(PROFILES, "plans", plan)
        same_as_cli(f"simulate shipped {plan}", binary, lambda: gpipe_plan.simulate(path), ["simulate", path, "--json"],
                    json.loads)
        for fmt in ("pytorch-csv", "megatron-layout"):
            same_as_cli(f"export shipped {plan} as {fmt}", binary, lambda: gpipe_plan.export(path, fmt, True),
                        ["export", path, "--format", fmt] + (["--with-communication"] if fmt == "pytorch-csv" else []), str)

    # Errors: the CLI's line (less its "gpipe-plan plan: " prefix) in the right exception.
    profile_path = os.path.join(PROFILES, "tiny-gpt-cpu.json")
    cluster_path = os.path.join(PROFILES, "clusters", "cpu-2.json")
    errors = [
        (gpipe_plan.UsageError, {"memory": "12"}, ["--memory", "12"]),
        (gpipe_plan.UsageError, {"stages": 0}, ["--stages", "0"]),
        (gpipe_plan.UsageError, {"schedule": "1f2b"}, ["--schedule", "1f2b"]),
        (gpipe_plan.UsageError, {"stages": 2, "microbatches": 5}, ["--stages", "2", "--microbatches", "5"]),
    ]
    for kind, options, flags in errors:
        line = cli(binary, "plan", "--profile", profile_path, "--cluster", cluster_path, "--global-batch", "64", *flags,
                   expect=2).stderr.splitlines()[0]
        try:
            gpipe_plan.plan(profile_path, cluster_path, 64, **options)
            check(f"error {options}", "no exception", line)
        except kind as e:
            check(f"error {options}", "gpipe-plan plan: " + str(e), line)
    missing = os.path.join(SOURCE, "no-such-profile.json")
    line = cli(binary, "plan", "--profile", missing, "--cluster", cluster_path, "--global-batch", "64",
               expect=1).stderr.splitlines()[0]
    try:
        gpipe_plan.load_profile(missing)
        check("missing profile", "no exception", line)
    except gpipe_plan.Error as e:
        check("missing profile", "gpipe-plan plan: " + str(e), line)
    try:
        gpipe_plan.plan(profile_path, cluster_path, 64, stage=2)
        check("unknown option", "no exception", "UsageError")
    except gpipe_plan.UsageError as e:
        check("unknown option", "unknown option \"stage\"" in str(e), True)
    # The Python examples of README.md and docs/python.md run as written (from the checkout, where
    # their paths are; in a scratch folder's cwd for the files they write).
    for page in ("README.md", "docs/python.md"):
        text = open(os.path.join(SOURCE, page)).read()
        example = text.split("```python\n", 1)[1].split("```", 1)[0].replace('"profiles/', '"' + PROFILES + "/")
        here = os.getcwd()
        with tempfile.TemporaryDirectory() as scratch:
            os.chdir(scratch)
            try:
                exec(compile(example, f"{page}'s Python example", "exec"), {})
                check(f"{page}'s Python example runs", True, True)
            finally:
                os.chdir(here)
    if FAILURES:
        raise SystemExit(f"{len(FAILURES)} differences: {', '.join(FAILURES)}")
    print("the Python API gives the CLI's answers")


if __name__ == "__main__":
    main()
