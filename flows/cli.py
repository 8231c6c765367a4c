"""``synrail`` command line. It lives beside the flows it runs, so that ``synrail/`` stays Prefect-free.

Exit codes: 0 done, 1 the build failed, 2 bad input (config, output folder, arguments, input data
that cannot make the dataset, an extra the config needs that is not installed). Bad input prints one
message; a traceback only with ``--verbose``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from flows.prefect_env import configure_command_line, local_database_problem
from flows.train_cli import add_commands as add_train_commands
from synrail.config import BuildConfig, ConfigError, load_config, parse_override
from synrail.errors import InputError
from synrail.extras import check_extras
from synrail.path_check import check_paths
from synrail.storage.lock import OutputLocked, build_lock
from synrail.storage.output import OutputConflict, claim_output
from synrail.storage.store import Store, StoreError

console = Console(stderr=True)
# What a run can raise that is the user's to fix (exit 2, one message); anything else is a failure (exit 1).
INPUT_ERRORS = (ConfigError, InputError, OutputConflict, OutputLocked)


def _add_build_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=None, help="YAML config (default: the built-in defaults)")
    parser.add_argument("--out", required=True, help="output folder or URL (file://, s3://)")
    parser.add_argument("--num-images", type=int, help="override num_images")
    parser.add_argument("--seed", type=int, help="override seed")
    parser.add_argument("--overwrite", action="store_true",
                        help="delete what --out holds when it is not this build, then build")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="override any config field, e.g. --set compose.scale=linear (repeatable)")
    parser.add_argument("--verbose", action="store_true", help="show Prefect's own log lines on the console")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="synrail", description="Synthetic railway-obstacle detection datasets.")
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="build a dataset (a Prefect flow; ephemeral local mode by default)")
    _add_build_options(build)
    build.add_argument("--no-progress", action="store_true", help="no progress bar")
    _add_build_options(commands.add_parser("ablation", help="build the paper's Table 7 variants of a config "
                                                            "into OUT/<variant>, sharing caches"))
    inspect = commands.add_parser("inspect", help="a preflight: look at the footage and the gallery a config "
                                  "names (a sample through the track finder, the camera and the segmenter), "
                                  "write OUT/index.html, print what would be left out and an estimate of the "
                                  "build's time; no dataset is written, Prefect is not started")
    inspect.add_argument("--config", default=None, help="YAML config (default: the built-in defaults)")
    inspect.add_argument("--out", required=True, help="folder or URL (file://, s3://) for the report, index.html")
    inspect.add_argument("--num-images", type=int, help="override num_images (the estimate scales with it)")
    inspect.add_argument("--seed", type=int, help="override seed")
    inspect.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                         help="override any config field, as for build (repeatable)")
    inspect.add_argument("--frames-per-video", type=int, default=8, metavar="N",
                         help="frames of each video or frame sequence through the track finder (default 8)")
    inspect.add_argument("--gallery-sample", type=int, default=12, metavar="N",
                         help="candidates of each gallery source cut out (default 12)")
    validate = commands.add_parser("validate", help="check an exported dataset against the export contract")
    validate.add_argument("--out", required=True, help="the dataset folder or URL (file://, s3://)")
    add_train_commands(commands)  # train, evaluate: each sets its own handler
    return parser


def _overrides(args: argparse.Namespace) -> dict[str, object]:
    overrides = dict(parse_override(text) for text in args.set)
    if args.num_images is not None:
        overrides["num_images"] = args.num_images
    if args.seed is not None:
        overrides["seed"] = args.seed
    return overrides


def _summary_table(summary) -> Table:
    table = Table(title="images and annotations per split")
    table.add_column("split")
    table.add_column("images", justify="right")
    table.add_column("annotations", justify="right")
    for split, images in summary.images_per_split.items():
        table.add_row(split, str(images), str(summary.annotations_per_split.get(split, 0)))
    return table


def _class_table(summary) -> Table:
    table = Table(title="annotations per class")
    table.add_column("class")
    table.add_column("annotations", justify="right")
    for name, count in summary.annotations_per_class.items():
        table.add_row(name, str(count))
    return table


def _error(err: BaseException) -> int:
    """One message for bad input; exit code 2."""
    console.print(f"[red]error:[/red] {escape(str(err))}", highlight=False, soft_wrap=True)  # [sam] is no markup
    return 2


def _config_for(args: argparse.Namespace) -> BuildConfig | None:
    """The build's config, checked for the extras it needs, or None once the reason is printed; then
    Prefect's local defaults, which must be set before any flow module imports Prefect, and a look at
    the local Prefect database (None, with the reason, when the local server could not start on it)."""
    try:
        config = load_config(args.config, _overrides(args))
        check_extras(config)  # before any work: a missing extra names the key and the pip command
        check_paths(config)  # every configured path, in seconds: one line naming the key and the path
    except ConfigError as err:
        _error(err)
        return None
    configure_command_line(verbose=args.verbose)
    if problem := local_database_problem():
        _error(problem)
        return None
    return config


def build_command(args: argparse.Namespace) -> int:
    config = _config_for(args)
    if config is None:
        return 2
    from flows.build_dataset import build_with_runner  # Prefect reads its settings when imported

    started = time.perf_counter()
    try:
        out = Store(args.out)
        with build_lock(out, owner="synrail build"):  # refuse early, before any flow run starts
            claim_output(out, config, args.overwrite)
    except (OutputConflict, OutputLocked, StoreError) as err:
        return _error(err)
    try:
        summary = build_with_runner(config, args.out, show_progress=not args.no_progress and console.is_terminal)
    except INPUT_ERRORS as err:  # the inputs cannot make this dataset; or another build took the output
        return _error(err)
    except Exception as err:  # the flow run's own log has the traceback (on the console with --verbose)
        console.print(f"[red]build failed:[/red] {type(err).__name__}: {escape(str(err))}", highlight=False)
        return 1
    seconds = time.perf_counter() - started
    console.print(_summary_table(summary))
    console.print(_class_table(summary))
    console.print(f"built in {seconds:.1f} s: {summary.out_url}  (data.yaml, annotations/, dataset_card.md)",
                  highlight=False, soft_wrap=True)
    return 0


def validate_command(args: argparse.Namespace) -> int:
    from synrail.export.validate import validate_dataset

    try:
        problems = validate_dataset(args.out)
    except (OSError, ValueError, KeyError) as err:
        return _error(f"{args.out} is not a readable SynRail export: {err}")
    for problem in problems:
        console.print(problem, highlight=False, soft_wrap=True)
    console.print(f"{len(problems)} problem(s) in {args.out}", highlight=False)
    return 1 if problems else 0


def ablation_command(args: argparse.Namespace) -> int:
    config = _config_for(args)
    if config is None:
        return 2
    from flows.ablation import build_ablation

    try:
        summaries = build_ablation(config, args.out, args.overwrite)
    except (*INPUT_ERRORS, StoreError) as err:
        return _error(err)
    for name, summary in summaries.items():
        console.print(f"{name}: {sum(summary.images_per_split.values())} images at {summary.out_url}",
                      highlight=False, soft_wrap=True)
    return 0


def inspect_command(args: argparse.Namespace) -> int:
    """The preflight: the config and its paths checked as for build, then a sample of every input looked at;
    Prefect is neither imported nor started."""
    from synrail.preflight import inspect_build, summary_lines, write_report

    if args.frames_per_video < 1 or args.gallery_sample < 1:
        return _error("--frames-per-video and --gallery-sample must be at least 1")
    try:
        config = load_config(args.config, _overrides(args))
        check_extras(config)
        check_paths(config)
        out = Store(args.out)
        out.check_writable()  # before any work: a report that cannot be written is known now
    except ConfigError as err:
        return _error(err)
    except OSError as err:  # StoreError among them
        return _error(f"--out {args.out}: cannot write there ({err})")
    try:
        inspection = inspect_build(config, args.frames_per_video, args.gallery_sample)
    except INPUT_ERRORS as err:
        return _error(err)
    for line in summary_lines(inspection):
        print(line)
    print(f"report: {write_report(inspection, args.out)}  (inspected in {inspection.seconds:.1f} s; "
          "no dataset written)")
    return 0


COMMANDS = {"build": build_command, "inspect": inspect_command, "ablation": ablation_command,
            "validate": validate_command}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command in COMMANDS:
        return COMMANDS[args.command](args)
    configure_command_line(verbose=getattr(args, "verbose", False))
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
