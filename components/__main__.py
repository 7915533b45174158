"""Command line of the components: `synth` (offline plan), `charts pull` (chart cache), `verify` (live checks),
`plan-burst` (burst model), `check` (the policy pack over a plan) and `policy-pack path` (the pack's folder)."""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from pathlib import Path

PROG = f"python -m {__package__ or 'components'}"
"""How the user called us: `python -m components` in this repository, `python -m gpuburst` once installed."""

CHARTS_HELP = ("chart cache folder of <chart>-<version>.tgz archives (default: $GPUBURST_CHARTS, else ../shared/charts "
               "beside the project when present, else $XDG_CACHE_HOME/gpuburst/charts or ~/.cache/gpuburst/charts)")


def _synth(argv: list[str]) -> int:
    from .spec.validation import ConfigError
    from .synth.charts import shallow_fix
    from .synth.synth import SynthError, checkov_charts, summary, synth

    parser = argparse.ArgumentParser(
        prog=f"{PROG} synth",
        description="Run the stack's Pulumi program offline under recording mocks and write the plan: "
                    "OUT/plan.json (every registration, sorted by URN, with each Helm chart's rendered objects as "
                    "its children) and OUT/manifests/*.yaml (the charts' objects under OUT/manifests/<chart>/).")
    parser.add_argument("--project-dir", type=Path, default=Path("."),
                        help="the Pulumi project to run: the folder of its Pulumi.yaml, whose `main` (default "
                             "__main__.py) runs under the project's own name (default: the working folder)")
    parser.add_argument("--stack", default="dev", help="stack whose Pulumi.<stack>.yaml to read (default: dev)")
    parser.add_argument("--out", default="out", type=Path, help="output folder (default: out)")
    parser.add_argument("--stack-file", type=Path, default=None,
                        help="read the config from this YAML file instead of Pulumi.<stack>.yaml")
    parser.add_argument("--charts", type=Path, default=None, help=CHARTS_HELP)
    args = parser.parse_args(argv)
    try:
        # The program's pulumi.log lines (info, warning, error) as they come, as `pulumi preview` shows them.
        result = synth(args.stack, args.out, project_dir=args.project_dir, stack_file=args.stack_file,
                       charts=args.charts, on_log=lambda line: print(line, file=sys.stderr, flush=True))
    except (SynthError, ConfigError) as e:
        print(f"synth: {e}", file=sys.stderr)
        return 2
    for entry in result.plan.get("shallow") or []:
        fix = shallow_fix(entry, PROG)
        print(f"synth: chart {entry['chart']} {entry['version']} not rendered: {entry['reason']}; the plan is "
              f"shallow{f' ({fix})' if fix else ''}", file=sys.stderr)
    checkov_charts(result)
    print(summary(result))
    return 0


def _charts(argv: list[str]) -> int:
    from . import catalogue
    from .spec.extras import is_installed, missing_message
    from .spec.validation import ConfigError
    from .synth.charts import PULL_TIMEOUT_S, ChartError, archive_name, pull, pull_destination, search_path
    from .synth.synth import SynthError, stack_charts

    parser = argparse.ArgumentParser(
        prog=f"{PROG} charts",
        description="`pull`: download the Helm charts the stack renders (its program run offline under mocks, as "
                    "the synth runs it: the charts its plan has, at their versions) from their repositories into "
                    "the chart cache the synth renders from (needs the network; a stack that renders no chart needs "
                    "nothing). --all: every chart the catalogue pins (gpuburst.catalogue.CHARTS, in "
                    "gpuburst.catalogue.pins) instead.")
    parser.add_argument("action", choices=["pull"])
    parser.add_argument("--project-dir", type=Path, default=Path("."),
                        help="the Pulumi project whose charts to pull: the folder of its Pulumi.yaml (default: the "
                             "working folder)")
    parser.add_argument("--stack", default="dev", help="stack whose Pulumi.<stack>.yaml to read (default: dev)")
    parser.add_argument("--stack-file", type=Path, default=None,
                        help="read the config from this YAML file instead of Pulumi.<stack>.yaml")
    parser.add_argument("--all", action="store_true",
                        help="every pinned chart of the catalogue, whatever the stack renders (no program is run)")
    parser.add_argument("--charts", type=Path, default=None,
                        help="chart cache to fill (default: $GPUBURST_CHARTS, else $XDG_CACHE_HOME/gpuburst/charts or "
                             "~/.cache/gpuburst/charts; never ../shared/charts, which the synth reads before it)")
    parser.add_argument("--timeout", type=float, default=PULL_TIMEOUT_S,
                        help=f"seconds to wait for each chart (default: {PULL_TIMEOUT_S:g})")
    parser.add_argument("--if-missing", action="store_true",
                        help="pull only the charts the synth would not find (in --charts, $GPUBURST_CHARTS, "
                             "../shared/charts or the user cache); with all of them there, or none needed, touch no "
                             "network")
    args = parser.parse_args(argv)
    cache, source = pull_destination(args.charts)
    if args.all:
        pins, what = list(catalogue.CHARTS.values()), "pinned charts"
    else:
        try:
            pins, what = stack_charts(args.stack, args.project_dir, args.stack_file), "charts the stack renders"
        except (SynthError, ConfigError) as e:
            print(f"charts pull: {e}", file=sys.stderr)
            return 2
        if not pins:
            print(f"charts: stack {args.stack} renders no Helm chart: nothing to pull")
            return 0
    if args.if_missing:
        where = search_path(args.charts)
        wanted = len(pins)
        pins = [p for p in pins if not any((d / archive_name(p.chart, p.version)).is_file() for d in where)]
        if not pins:
            print(f"charts: all {wanted} {what} are in the chart cache ({', '.join(str(d) for d in where)})")
            return 0
    if not is_installed("helm_python"):
        print(f"charts pull: {missing_message('helm_python', 'pulling a Helm chart')}", file=sys.stderr)
        return 2
    try:
        for line in pull(cache, timeout_s=args.timeout, charts=pins):
            print(line)
    except (ChartError, OSError) as e:
        print(f"charts pull: {e}", file=sys.stderr)
        return 2
    print(f"chart cache: {cache} ({source})")
    return 0


def _missing(command: str, modules: tuple[str, ...]) -> int | None:
    """2 after one line on stderr when a package `command` needs (an extra's, spec/extras.py) is not installed."""
    from .spec.extras import is_installed, missing_message

    for module in modules:
        if not is_installed(module):
            print(f"{command}: {missing_message(module, f'{PROG} {command}')}", file=sys.stderr)
            return 2
    return None


def _verify(argv: list[str]) -> int:
    missing = _missing("verify", ("boto3", "kubernetes", "jsonschema"))
    if missing is not None:
        return missing
    from .verify.cli import main

    return main(argv)


def _rehearse(argv: list[str]) -> int:
    from .rehearse.cli import main

    return main(argv, prog=f"{PROG} rehearse")


def _deploy(argv: list[str]) -> int:
    missing = _missing("deploy", ("boto3",))
    if missing is not None:
        return missing
    from .deploy_command import main

    return main(argv, f"{PROG} deploy")


def _plan_burst(argv: list[str]) -> int:
    """`plan-burst`: the burst planner's report (table, --json, --out PNGs); 2 with a one-line error."""
    import json
    import textwrap

    from .config import parse_config
    from .config.files import StackFileError, read_stack_config
    from .planning import (
        ADVICE_TOP,
        STAGES,
        Trace,
        parse_burst,
        parse_set,
        parse_trace,
        plan_stack,
        plans_json,
        plans_table,
        write_timeline,
    )
    from .planning import TRACE_FORMAT as TRACE_HELP
    from .spec.validation import ConfigError

    parser = argparse.ArgumentParser(
        prog=f"{PROG} plan-burst",
        description=textwrap.fill(
                    "Model a burst, or a recorded trace of arrivals, through the stack as configured (KEDA poll, "
                    "Karpenter NodeClaim, EC2 launch, GPU registration, image pull, model load, inference, "
                    "consolidation) and report, per workload, the time to the first and last result, the per-message "
                    "latency (mean, p95, max), nodes launched, GPU node-seconds billed and cost, as a ScaledJob and as "
                    "one consumer. Deterministic: no clock, no network.", 79) + "\n\n" + textwrap.fill(
                    "With --deadline and/or --budget it advises instead: it searches what the stack allows "
                    "(messages per Job, Jobs at once up to gpuLimit, each admitted instance type, spot or on-demand, "
                    "a warm floor at the burst's time, the pattern where the work allows both) and ranks the "
                    "configurations that meet the deadline, cheapest first (with only --budget: those within it, "
                    "fastest first), each with the Pulumi.<stack>.yaml lines to set; when none does, it says which "
                    "stage bounds it.", 79),
        # Raw so the CSV example keeps its lines; the prose is wrapped here instead.
        epilog=textwrap.fill("--trace CSV format: " + TRACE_HELP + ".", 79) + "\nExample:\n  at,items,workload\n"
               "  2026-01-05T09:00:00Z,20,studies\n  2026-01-05T10:00:00Z,20,studies\n\nAdvice example:\n  "
               f"{PROG} plan-burst --workload slides --burst 200@2026-12-07T09:00 --deadline 3h",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stack", default="dev", help="stack whose Pulumi.<stack>.yaml to read (default: dev)")
    parser.add_argument("--stack-file", type=Path, default=None, help="read the config from this YAML file instead")
    parser.add_argument("--workload", default=None, help="plan only this workload (default: all)")
    parser.add_argument("--burst", action="append", default=[], metavar="N@ISO-DATETIME",
                        help="a burst of N messages at that time (repeatable; default: one burst of each workload's "
                             "burstItems, at no time, so the warm floor is not applied)")
    parser.add_argument("--trace", type=Path, default=None, metavar="CSV",
                        help="a recorded arrival pattern instead of bursts (not with --burst): times are from its "
                             "first arrival; format below")
    parser.add_argument("--warm", action="store_true",
                        help="nodes up with the image cached and KEDA's poll zeroed: the chooser's seed model")
    parser.add_argument("--set", action="append", default=[], metavar="STAGE=SECONDS", dest="sets",
                        help=f"override a stage's seconds (after --warm); stages: {', '.join(STAGES)}")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="also write a PNG timeline per workload and burst here (plan-burst-<workload>-<n>.png; a "
                             "trace: plan-burst-<workload>-trace.png)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--deadline", default=None, metavar="DURATION",
                        help="advise: the configurations whose last result comes within DURATION of the burst (3h, "
                             "90m, 2h30m or seconds), cheapest first, with their config lines")
    parser.add_argument("--budget", default=None, metavar="USD",
                        help="advise: the configurations that cost at most USD for the burst, fastest first (with "
                             "--deadline: the cheapest that meet it within USD)")
    parser.add_argument("--top", type=int, default=ADVICE_TOP, metavar="N",
                        help=f"advise: list the N best configurations (default {ADVICE_TOP})")
    args = parser.parse_args(argv)
    if args.deadline is not None or args.budget is not None:
        return _advise(args)
    from .spec.extras import is_installed, missing_message

    if args.out is not None and not is_installed("matplotlib"):
        print(f"plan-burst: {missing_message('matplotlib', '--out (the PNG timelines)')}", file=sys.stderr)
        return 2
    try:
        bursts = [parse_burst(b) for b in args.burst]
        if args.trace is not None and bursts:
            raise ConfigError("--trace", str(args.trace), "not with --burst (a trace is the whole arrival pattern: "
                                                          "give one or the other)")
        trace = parse_trace(args.trace) if args.trace is not None else None
        overrides = dict(parse_set(s) for s in args.sets)
        config = parse_config(read_stack_config(args.stack, stack_file=args.stack_file), stack=args.stack)
        plans = plan_stack(config, workload=args.workload, bursts=bursts, warm=args.warm, overrides=overrides,
                           trace=trace)
    except (StackFileError, ConfigError) as e:
        print(f"plan-burst: {e}", file=sys.stderr)
        return 2
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        for name, per_burst in plans.items():
            for i, wp in enumerate(per_burst, 1):
                suffix = "trace" if isinstance(wp.burst, Trace) else i
                write_timeline(wp, args.out / f"plan-burst-{name}-{suffix}.png")
    print(json.dumps(plans_json(plans), indent=2) if args.json else plans_table(plans))
    return 0


def _advise(args: argparse.Namespace) -> int:
    """`plan-burst --deadline/--budget`: the advisor's ranked configurations (table or --json); 2 with a one-line
    error."""
    import json

    from .config import parse_config
    from .config.files import StackFileError, read_stack_config
    from .planning import Burst, advice_json, advice_table, advise, parse_budget, parse_burst, parse_duration, parse_set
    from .spec.validation import ConfigError

    try:
        for flag, value, why in (("--trace", args.trace, "a burst"), ("--warm", args.warm or None, "the real stages"),
                                 ("--out", args.out, "a table or --json")):
            if value is not None:
                raise ConfigError(flag, str(value), f"not with --deadline/--budget (the advisor searches {why})")
        if len(args.burst) > 1:
            raise ConfigError("--burst", args.burst, "one burst with --deadline/--budget")
        if args.top < 1:
            raise ConfigError("--top", args.top, "a whole number >= 1")
        deadline = parse_duration(args.deadline) if args.deadline is not None else None
        budget = parse_budget(args.budget) if args.budget is not None else None
        burst = parse_burst(args.burst[0]) if args.burst else None
        overrides = dict(parse_set(s) for s in args.sets)
        config = parse_config(read_stack_config(args.stack, stack_file=args.stack_file), stack=args.stack)
        names = [w.name for w in config.workloads]
        if args.workload is not None and args.workload not in names:
            raise ConfigError("--workload", args.workload, f"one of {', '.join(names)}")
        advices = [advise(config, w.name, burst or Burst(w.burst_items), deadline_s=deadline, budget_usd=budget,
                          overrides=overrides, top=args.top, stack=args.stack)
                   for w in config.workloads if args.workload in (None, w.name)]
    except (StackFileError, ConfigError) as e:
        print(f"plan-burst: {e}", file=sys.stderr)
        return 2
    print(json.dumps(advice_json(advices), indent=2) if args.json else advice_table(advices))
    return 0


POLICY_EXTRA = 'pip install "gpuburst[policy]"'
"""How to get the policy pack's runtime (pulumi-policy) beside the components."""


def _pack_package() -> str:
    """The policy pack beside these components: `gpuburst.policy` installed (the editable install maps it to
    policies/ too), `policies` when this runs as `python -m components` in the repository."""
    return "policies" if (__package__ or "components") == "components" else f"{__package__}.policy"


def _pack_dir() -> Path:
    """The pack's folder (its PulumiPolicy.yaml and __main__.py), found without importing the pack."""
    package = _pack_package()
    if package == "policies":
        return Path(__file__).resolve().parent.parent / "policies"
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"policy-pack: {package} is not installed beside {__package__}: reinstall gpuburst")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def _import_pack(module: str):
    package = _pack_package()
    if package == "policies":
        root = str(Path(__file__).resolve().parent.parent)
        if root not in sys.path:  # `python -m components` from elsewhere, with the repository on PYTHONPATH
            sys.path.insert(0, root)
    return importlib.import_module(f"{package}.{module}")


def _check(argv: list[str]) -> int:
    """`check PLAN [--config CONFIG]`: the pack's offline checker (policies/cli.py), under this command's name."""
    asks_help = not argv or argv[0] in ("-h", "--help", "help")
    if not asks_help and importlib.util.find_spec("pulumi_policy") is None:
        print(f"check: the policy pack needs pulumi-policy, which is not installed here: {POLICY_EXTRA}",
              file=sys.stderr)
        return 2
    return _import_pack("cli").main(["check", *argv], prog=f"{PROG} check", label="check")


def pack_python_warning(pack_dir: Path, prefix: str | None = None) -> str | None:
    """One line when the Pulumi CLI could not run the pack in `pack_dir` with this environment's Python (`prefix`,
    default sys.prefix), else None. The CLI runs `<virtualenv>/bin/python` (the path taken relative to the pack's
    folder) or, with no `virtualenv`, `python3` from PATH; setup.py writes the installed copy's `virtualenv`."""
    import yaml

    here = Path(prefix if prefix is not None else sys.prefix).resolve()
    manifest = pack_dir / "PulumiPolicy.yaml"
    try:
        doc = yaml.safe_load(manifest.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as e:
        return f"warning: cannot read {manifest}: {e}"
    runtime = doc.get("runtime") if isinstance(doc, dict) else None
    options = runtime.get("options") if isinstance(runtime, dict) else None
    virtualenv = options.get("virtualenv") if isinstance(options, dict) else None
    if not virtualenv:
        return (f"warning: {manifest} names no virtualenv, so the Pulumi CLI runs the pack with python3 from PATH: "
                f"activate this environment ({here}) first")
    venv = (pack_dir / str(virtualenv)).resolve()
    if venv != here:
        return (f"warning: {manifest} has virtualenv {virtualenv!r} = {venv}, not this environment ({here}): the "
                f"Pulumi CLI would run the pack there (install gpuburst into a virtualenv)")
    if not (venv / "bin" / "python").is_file():
        return f"warning: {venv} has no bin/python, which the Pulumi CLI runs the pack with"
    if importlib.util.find_spec("pulumi_policy") is None:
        return f"warning: pulumi-policy is not installed here, and the pack needs it: {POLICY_EXTRA}"
    return None


def _policy_pack(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} policy-pack",
        description="`path`: print the policy pack's folder (its PulumiPolicy.yaml and __main__.py) for "
                    "`pulumi preview --policy-pack \"$(gpuburst policy-pack path)\"`; a one-line warning on stderr "
                    "when the Pulumi CLI could not run it with this environment's Python.")
    parser.add_argument("action", choices=["path"])
    parser.parse_args(argv)
    pack_dir = _pack_dir()
    warning = pack_python_warning(pack_dir)
    if warning:
        print(f"policy-pack: {warning}", file=sys.stderr)
    print(pack_dir)
    return 0


COMMANDS = {"synth": _synth, "charts": _charts, "verify": _verify, "plan-burst": _plan_burst, "check": _check,
            "policy-pack": _policy_pack, "rehearse": _rehearse, "deploy": _deploy}


SIGPIPE_EXIT = 141
"""The exit status when stdout's reader went away (`... | head`): 128 + SIGPIPE, what a shell reports for a tool that
the signal ended."""


def main(argv: list[str] | None = None) -> int:
    """Run one command; when the reader of stdout closes early (`synth | head`), end quietly with SIGPIPE_EXIT."""
    try:
        code = _main(argv)
        sys.stdout.flush()  # a closed pipe shows here at the latest, not at interpreter exit
        return code
    except BrokenPipeError:
        # The Python documentation's recipe (signal module, "Note on SIGPIPE"): point stdout at devnull, so the
        # interpreter's own flush at exit finds no closed pipe to complain about.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return SIGPIPE_EXIT


def _main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print(f"usage: {PROG} {{synth,charts,verify,plan-burst,check,policy-pack,rehearse,deploy}} [options]\n\n"
              "  synth   render the whole stack offline under Pulumi mocks (out/plan.json, out/manifests/)\n"
              "  charts  `charts pull`: fill the chart cache with the Helm charts the stack renders (online)\n"
              "  verify  post-upgrade checks against the live cluster and AWS (exit 1 on any failure)\n"
              "  plan-burst  model a burst or a trace: time to first/last result, latency and cost, ScaledJob vs "
              "consumer;\n              with --deadline/--budget, the cheapest configurations that meet it and the "
              "lines to set\n"
              "  check   run the policy pack over a synth's plan.json offline (exit 1 on a mandatory violation)\n"
              "  policy-pack  `policy-pack path`: the pack's folder, for `pulumi preview --policy-pack`\n"
              "  rehearse  what AWS will decide at apply time for the deploy model (gpuburst:deploy): deployers, "
              "uploaders,\n            readers, workers and the Kubernetes API, offline (exit 1 on a denial)\n"
              "  deploy  run `pulumi up` (or preview, refresh, destroy) in the stack's in-VPC deploy runner "
              "(gpuburst:deploy.runner)\n\n"
              f"Run `{PROG} COMMAND --help` for a command's options.",
              file=sys.stderr if argv and argv[0] not in ("-h", "--help") else sys.stdout)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    return COMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
