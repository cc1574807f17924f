"""The command line: list, render, check, lock. Bad input: one line on stderr and exit status 2."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import NoReturn

from .artifacts import Artifact, Renderer
from .errors import RecipeError
from .lightning_range import patches_for
from .locking import LockRequest, lock, rewrite_headers, stale_locks
from .outputs import broken, drift, remove_stale, render_selection, write_artifacts
from .recipes import Recipes, load_recipes

PROG = "render.py"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Render lightning-xpu install artifacts from recipes/matrix.toml, recipes/sites/*.toml "
        "and recipes/templates/.",
    )
    parser.add_argument("--recipes", type=Path, help="recipes directory (default: the one holding render.py)")
    parser.add_argument(
        "--repo", type=Path, help="repository root (default: the parent of the recipes directory)"
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    listing = commands.add_parser("list", help="list versions, variants, sites and unverified facts")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    listing.add_argument(
        "--patches",
        action="store_true",
        help="per recipe Lightning pin, the runtime patches lightning_xpu applies (lightning_xpu/versions.py)",
    )

    rendering = commands.add_parser(
        "render",
        help="render artifacts",
        description="Render the artifacts of the selected versions and sites into --out DIR (install job, "
        "and per variant requirements.txt, environment.yml and previews of the modulefile, setup script and "
        "site validation job the install writes). `render --all` without --out regenerates every committed render "
        "in place (scripts/<site>/) and deletes committed renders no recipe produces any more.",
    )
    rendering.add_argument("--torch", action="append", metavar="X.Y", help="PyTorch version (repeatable)")
    rendering.add_argument("--site", action="append", help="site profile (repeatable)")
    rendering.add_argument("--variant", action="append", help="only these variants' per-variant files")
    rendering.add_argument("--all", action="store_true", help="every version and site")
    rendering.add_argument("--out", type=Path, help="output directory (required unless --all)")

    commands.add_parser(
        "check",
        help="fail when committed renders or locks differ from a fresh render, or a render is broken",
        description="Render everything into a temporary directory and compare with the committed renders and "
        "locks; refuse an empty artifact, and run `bash -n` on every rendered shell script and on the install "
        "engine. Never touches the network. Exit 1 with one line per broken or drifted file.",
    )

    locking = commands.add_parser(
        "lock",
        help="write hashed pip locks where the package sources are reachable",
        description="Resolve each selected (version, variant) with pip (dry run, wheels only) and write "
        "recipes/locks/<ver>-<variant>.txt with sha256 hashes. --pip-source recipe (default) uses the "
        "recipe's own indexes and ignores this machine's pip configuration; --pip-source system uses this "
        "machine's pip configuration instead, and then only variants whose torch carries a build label "
        "(+cpu, +xpu) are tried, so pip can only pick a torch of the right build. Says on one line per "
        "(version, variant) what it could not lock and why, and what happened to the conda layer.",
    )
    locking.add_argument("--torch", action="append", metavar="X.Y", help="PyTorch version (repeatable)")
    locking.add_argument("--variant", action="append", help="variant (repeatable)")
    locking.add_argument("--pip-source", choices=("recipe", "system"), default="recipe")
    locking.add_argument(
        "--timeout", type=int, default=15, help="pip network timeout in seconds (default 15)"
    )
    locking.add_argument(
        "--header-only",
        action="store_true",
        help="offline: rewrite the recipe header (# recipe:, # inputs-sha256:) of the selected committed locks "
        "that already hold exactly the recipe's pins; entries and hashes are not touched",
    )
    return parser


def _cmd_patches(recipes: Recipes, as_json: bool) -> int:
    """Per Lightning pin of the recipes (and the PyTorch versions pinning it), the patches it gets."""
    pins: dict[str, list[str]] = {}
    for minor, version in recipes.matrix.versions.items():
        pins.setdefault(version.lightning, []).append(minor)
    data = {lightning: {"pytorch": minors, "patches": patches_for(lightning)} for lightning, minors in pins.items()}
    if as_json:
        print(json.dumps(data, indent=2))
        return 0
    for lightning, entry in data.items():
        count = sum(len(targets) for targets in entry["patches"].values())
        known = f"{count} patches" if count else "no patches: lightning_xpu/versions.py does not know this minor"
        print(f"Lightning {lightning} (PyTorch {', '.join(entry['pytorch'])}): {known}")
        for module, targets in entry["patches"].items():
            print(f"  {module}:")
            for target in targets:
                print(f"    {target}")
    return 0


def _cmd_list(recipes: Recipes, as_json: bool) -> int:
    data = {
        "versions": {
            minor: {
                "torch": v.torch,
                "lightning": v.lightning,
                "python": v.python,
                "backend": v.backend,
                "oneapi": v.oneapi_generation or None,
                "released": v.released,
                "variants": {
                    name: {
                        "tag": v.tag(name),
                        "requirements": variant.requirements(),
                        "sources": [s.name for s in variant.sources],
                    }
                    for name, variant in v.variants.items()
                },
                "unverified": v.unverified(),
            }
            for minor, v in recipes.matrix.versions.items()
        },
        "sites": {
            name: {
                "scheduler": s.scheduler,
                "variant": s.default_variant,
                "prefix": s.default_prefix,
                "env_manager": s.env_manager,
                "modules": list(s.modules),
            }
            for name, s in recipes.sites.items()
        },
    }
    if as_json:
        print(json.dumps(data, indent=2))
        return 0
    print(f"{'torch':<7} {'pins':<9} {'python':<7} {'backend':<8} {'oneapi':<7} {'lightning':<10} variants")
    for minor, v in recipes.matrix.versions.items():
        print(
            f"{minor:<7} {v.torch:<9} {v.python:<7} {v.backend:<8} {v.oneapi_generation or '?':<7} "
            f"{v.lightning:<10} {' '.join(v.variants)}"
        )
        for line in v.unverified():
            print(f"        unverified: {line}")
    print()
    print(f"{'site':<9} {'scheduler':<10} {'variant':<8} {'env':<6} prefix")
    for name, s in recipes.sites.items():
        print(f"{name:<9} {s.scheduler:<10} {s.default_variant:<8} {s.env_manager:<6} {s.default_prefix}")
    return 0


def _cmd_render(recipes: Recipes, args: argparse.Namespace) -> int:
    renderer = Renderer(recipes)
    if args.all and (args.torch or args.site):
        raise RecipeError("--all renders everything: leave out --torch and --site, or leave out --all")
    if not args.all and not (args.torch or args.site):
        raise RecipeError("nothing selected: give --torch X.Y and/or --site NAME with --out DIR, or --all")
    if not args.all and args.out is None:
        raise RecipeError("--out DIR is required unless --all (which renders into the repository)")
    versions = recipes.select_versions(args.torch)
    if args.torch and args.variant:
        for version in versions:
            recipes.select_variants(version, args.variant, strict=True)
    artifacts = render_selection(renderer, versions, recipes.select_sites(args.site), args.variant)
    refused = _refusals(recipes, artifacts)
    if refused:
        for line in refused:
            print(line, file=sys.stderr)
        print(f"{PROG} render: nothing written: {len(refused)} problem(s) that check refuses too", file=sys.stderr)
        return 1
    if args.out is not None:
        written = write_artifacts(artifacts, args.out)
        print(f"rendered {len(artifacts)} files into {args.out} ({len(written)} written)")
        return 0
    committed = [a for a in artifacts if a.committed]
    written = write_artifacts(committed, recipes.repo_root)
    removed = remove_stale(recipes.repo_root, artifacts)
    for path in written:
        print(f"updated {path}")
    for path in removed:
        print(f"removed {path}")
    print(f"{len(committed)} committed renders up to date ({len(written)} updated, {len(removed)} removed)")
    return 0


def _refusals(recipes: Recipes, artifacts: list[Artifact]) -> list[str]:
    """What both `render` and `check` refuse: broken renders or hand-written code, and locks that are not their
    recipe's. (`check` also refuses drift, which `render --all` repairs.)"""
    return [f"broken: {line}" for line in broken(artifacts, recipes.repo_root)] + [
        f"stale lock: {line}" for line in stale_locks(recipes)
    ]


def _cmd_check(recipes: Recipes) -> int:
    renderer = Renderer(recipes)
    everything = render_selection(renderer, recipes.select_versions(None), recipes.select_sites(None), None)
    refused = _refusals(recipes, everything)
    problems = drift(recipes.repo_root, everything)
    for line in refused:
        print(line)
    for line in problems:
        print(f"drift: {line}")
    if refused:
        print(
            f"{PROG} check: {len(refused)} problem(s): fix the template (recipes/templates/) or the hand-written "
            "file named, and lock again (render.py lock) where a lock is stale",
            file=sys.stderr,
        )
    if problems:
        print(
            f"{PROG} check: {len(problems)} drifted file(s): run `python recipes/render.py render --all` and commit",
            file=sys.stderr,
        )
    if refused or problems:
        return 1
    print(
        f"ok: {sum(a.committed for a in everything)} committed renders and the locks match the recipes; "
        "no empty artifact; bash -n and luac -p pass on every render; bash -n, shellcheck and luac -p pass on "
        "the hand-written shell and Lua"
    )
    return 0


def _cmd_lock(recipes: Recipes, args: argparse.Namespace) -> int:
    if args.header_only:
        lines = rewrite_headers(recipes, args.torch, args.variant)
        for line in lines or ["no committed lock selected"]:
            print(line)
        return 1 if any(line.startswith("not rewritten") for line in lines) else 0
    request = LockRequest(
        versions=args.torch, variants=args.variant, pip_source=args.pip_source, timeout=args.timeout
    )
    results = lock(recipes, request)
    for line in results.lines:
        print(line)
    explicit = bool(args.torch or args.variant)
    return 1 if explicit and not results.written else 0


def main(argv: list[str], default_recipes: Path) -> int:
    args = _parser().parse_args(argv)
    try:
        recipes = load_recipes(args.recipes or default_recipes, args.repo)
        if args.command == "list":
            return _cmd_patches(recipes, args.json) if args.patches else _cmd_list(recipes, args.json)
        if args.command == "render":
            return _cmd_render(recipes, args)
        if args.command == "check":
            return _cmd_check(recipes)
        return _cmd_lock(recipes, args)
    except RecipeError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
