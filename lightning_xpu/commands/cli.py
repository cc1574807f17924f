"""`lightning-xpu` (also `python -m lightning_xpu`): doctor, validate and report.

  doctor    the full picture: torch build and version, variant, devices and their properties, driver, relevant
            environment variables, XCCL/ccl availability, the launcher detected, and why XPU cannot be used;
            exit status 1 when a check failed
  validate  a level's checks (lightning_xpu/validation/framework.py): `--level site` (default), the site validation
            job's; `--level smoke`, the install's smoke job. Writes a JSON report (schema:
            lightning_xpu/validation/schema.json) and a Markdown one; exit status 1 when a check failed
  report    the patch report: which Lightning patches were expected and applied (as lightning_xpu.report())
  user-env  make your own writable layer over this (read-only) environment, where pip and uv install
            (lightning_xpu/commands/userenv.py)
  kernel    install, uninstall or list the Jupyter kernel of the loaded install (lightning_xpu/commands/kernel.py)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from lightning_xpu.validation.framework import LEVELS, Context
from lightning_xpu.validation.model import FAIL, PASS, SKIP, Check, Report


def doctor_report() -> Report:
    """What the doctor prints, as a report (kind "doctor"). Asks torch for XPU devices: the user asked."""
    import torch

    from lightning_xpu import diagnosis
    from lightning_xpu.patch_report import patch_rows
    from lightning_xpu.validation.model import relevant_environment, versions

    found = versions()
    found.update(diagnosis.driver_facts())
    report = Report("doctor", found, environment=relevant_environment())
    reason = diagnosis.unusable_reason()
    if reason is None:
        count = int(torch.xpu.device_count())
        report.devices = diagnosis.device_facts(count)
        found["driver_version"] = str(report.devices[0].get("driver_version")) if report.devices else None
        report.checks.append(Check("xpu_usable", PASS, f"{count} XPU device(s): {report.devices[0]['name']}"))
    else:
        report.checks.append(Check("xpu_usable", FAIL, reason.replace(" " + diagnosis.DOCTOR_HINT, "")))
    # A torch without XPU has no XPU collective to check, and no version advice for one to give.
    xpu_build = reason is None or bool(getattr(torch.version, "xpu", None))
    backend, how = diagnosis.collective_backend() if xpu_build else (None, "")
    found["xpu_collective_backend"] = backend
    if not xpu_build:
        report.checks.append(Check("xpu_collectives", SKIP, "this PyTorch has no XPU support (see xpu_usable)"))
    elif backend is not None:
        report.checks.append(Check("xpu_collectives", PASS, f"{backend}: {how}"))
    else:
        report.checks.append(Check("xpu_collectives", SKIP if reason else FAIL,
                                   ("no Intel GPU; " if reason else "") + how))
    launch = diagnosis.launcher_facts()
    where = f" in {launch['scheduler']} job {launch['job']}" if launch["job"] else ""
    report.checks.append(Check("launcher", PASS, (launch["launcher"] or "none: a single process, Lightning starts"
                                                  " the ranks") + where))
    report.checks.append(pins_check())
    rows = patch_rows()
    if rows is None:
        report.checks.append(Check("patches", SKIP, "lightning_xpu.versions.patch_status is not in this build"))
    else:
        missing = [row.name for row in rows if row.expected and not row.applied]
        report.checks.append(Check("patches", FAIL if missing else PASS,
                                   f"expected but not applied: {', '.join(missing)}" if missing
                                   else f"{sum(r.applied for r in rows)} applied"))
    from lightning_xpu.commands.userenv import layer_check

    report.checks.append(layer_check())
    return report


def pins_check() -> Check:
    """Whether the installed packages are still the environment's pins (lightning_xpu/validation/pincheck.py)."""
    from lightning_xpu.validation import pincheck

    try:
        ok, line = pincheck.verdict(pincheck.environment_root())
    except pincheck.PinsMissing as exc:
        return Check("pins", SKIP, str(exc))
    return Check("pins", PASS if ok else FAIL, line)


def broken_report(error: Exception) -> Report:
    """The doctor's report where torch or Lightning does not import: what broke, read from package metadata only,
    and the pins, which often say why (PyPI's torchvision next to a +cpu torch, a CUDA torch in the user layer)."""
    import platform

    from lightning_xpu._version import __version__
    from lightning_xpu.install_facts import DISTRIBUTIONS, distribution_version, environment_variant
    from lightning_xpu.validation.model import relevant_environment

    found: dict[str, str | None] = {
        "python": platform.python_version(), "python_executable": sys.executable, "platform": platform.platform(),
        "lightning_xpu": __version__, "variant": environment_variant()[0],
        "torch": distribution_version("torch"), "torch_build": None,
        **{key: distribution_version(dist) for key, dist in DISTRIBUTIONS.items()},
    }  # fmt: skip
    report = Report("doctor", found, environment=relevant_environment())
    first = (f"{type(error).__name__}: {error}".splitlines() or [""])[0]
    report.checks += [Check("imports", FAIL, f"torch and Lightning must import, and did not: {first}"), pins_check()]
    return report


def cmd_doctor(args: argparse.Namespace) -> int:
    from lightning_xpu.validation.markdown import render

    try:
        report = doctor_report()
    except Exception as error:  # any import-time failure of torch or Lightning: the doctor still reports
        report = broken_report(error)
    if args.json:
        report.write(args.json)
    print(render(report.to_dict()))
    return 0 if report.ok else 1


def default_json(level: str, stamp: str) -> Path:
    """The site level writes where the job was submitted (its report goes back to the project); the smoke level
    into the user's state directory, never into the working directory or the (immutable) environment."""
    if level == "site":
        return Path(f"lightning-xpu-validation-{stamp}.json")
    from lightning_xpu.install_facts import environment_tag

    state = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return state / "lightning-xpu" / f"smoke-{environment_tag() or 'python'}-{stamp}.json"


def smoke_context(args: argparse.Namespace, workdir: Path) -> tuple[Context, list[str]]:
    """The smoke level's context and its notes: --require-xpu, else the environment's variant decides (the xpu
    variant must train on XPU)."""
    from lightning_xpu.install_facts import environment_variant

    notes = []
    require = bool(args.require_xpu)
    if require:
        notes.append("--require-xpu: the fits must run on an XPU device")
    else:
        variant, source = environment_variant()
        require = variant == "xpu"
        if require:
            notes.append(f"the xpu variant ({source}): the fits must run on an XPU device")
    return Context("auto", 0, workdir, require_xpu=require), notes


class InputError(Exception):
    """A bad option of `validate`: one line naming the fix (exit status 2)."""


def count_option(option: str, text: str, most: int | None = None) -> int:
    """The value of a count option (--nodes, --devices): a whole number from 1 to `most`."""
    if not text.isdigit() or int(text) < 1 or (most is not None and int(text) > most):
        wanted = "a positive number" if most is None else " or ".join(str(n) for n in range(1, most + 1))
        raise InputError(f"{option} must be {wanted}, got '{text}'")
    return int(text)


def site_job_options(args: argparse.Namespace) -> None:
    """The site validation job's options (<prefix>/validate_lightning.sh hands over with --site-job, its name):
    what it leaves out comes from the allocation (lightning_xpu/commands/allocation.py): the nodes, at most 2 (the
    launched checks use 2), and the report directory next to where the job was submitted."""
    from lightning_xpu.commands.allocation import job_stamp, node_count, submit_directory

    if args.level != "site":
        raise InputError(f"--site-job runs the site level, not --level {args.level}")
    if args.nodes is None:
        args.nodes = min(node_count(os.environ)[0], 2)
    else:
        args.nodes = count_option("--nodes", args.nodes, most=2)
    if args.out is None and args.json is None:
        args.out = submit_directory(os.environ)[0] / f"lightning-xpu-validation-{job_stamp(os.environ)}"


def report_paths(args: argparse.Namespace) -> tuple[Path, Path | None]:
    """The JSON and Markdown reports: --json/--markdown, else in --out, else the level's defaults. The smoke level
    writes Markdown only when asked: during an install its JSON is the one file it may write into the environment
    (the staging image is written meanwhile and leaves out only smoke.json)."""
    from lightning_xpu.commands.allocation import DATE_STAMP

    out = args.out
    json_path = args.json or (out / "validation.json" if out else default_json(args.level, time.strftime(DATE_STAMP)))
    markdown_path = args.markdown or (out / "validation.md" if out else None)
    if markdown_path is None and args.level == "site":
        markdown_path = json_path.with_suffix(".md")
    return json_path, markdown_path


def communication_options(args: argparse.Namespace) -> dict[str, float | int | None]:
    """The communication check's options (lightning_xpu/validation/comms.py), InputError naming the fix."""
    from lightning_xpu.validation.comms import parse_bytes

    found: dict[str, float | int | None] = {}
    try:
        found["comm_max_bytes"] = None if args.comm_max_bytes is None else parse_bytes(args.comm_max_bytes)
    except ValueError as error:
        raise InputError(f"--comm-max-bytes must be {error}") from None
    for option, key in (("comm_deadline", "comm_deadline_s"), ("link_gbps", "link_gbps"),
                        ("node_link_gbps", "node_link_gbps")):
        text = getattr(args, option)
        try:
            value = None if text is None else float(text)
        except ValueError:
            value = -1.0
        if value is not None and not value > 0:
            raise InputError(f"--{option.replace('_', '-')} must be a positive number, got '{text}'")
        found[key] = value
    return found


def cmd_validate(args: argparse.Namespace) -> int:
    from lightning_xpu.diagnosis import device_facts
    from lightning_xpu.environments.errors import LaunchError
    from lightning_xpu.validation.framework import checks_of, run_checks
    from lightning_xpu.validation.model import relevant_environment, versions

    specs = checks_of(args.level)
    if args.list:
        for spec in specs:
            print(f"{spec.name:24} {'XPU ' if spec.needs_xpu else 'any '} {spec.summary}")
        return 0
    only = [name for name in (args.only or "").split(",") if name]
    try:
        if args.site_job:
            site_job_options(args)
        else:
            args.nodes = 1 if args.nodes is None else count_option("--nodes", args.nodes)
        args.devices = None if args.devices is None else count_option("--devices", args.devices)
        comm_options = communication_options(args)
        unknown = sorted(set(only) - {spec.name for spec in specs})
        if unknown:
            raise InputError(f"unknown check(s) {', '.join(unknown)}; known: {', '.join(s.name for s in specs)}")
    except (InputError, LaunchError) as error:
        print(f"{args.site_job or 'lightning-xpu validate'}: {error}", file=sys.stderr)
        return 2
    json_path, markdown_path = report_paths(args)
    if args.site_job:  # the job's log says which environment ran where (the report says it again)
        print(f"{args.site_job}: {sys.executable}, {args.nodes} node(s); report in {args.out or json_path.parent}",
              flush=True)
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix=f"lxpu-validate-{args.level}-") as work:
        if args.level == "smoke":
            context, notes = smoke_context(args, Path(work))
        else:
            context = Context.detect(Path(work), nodes=args.nodes)
            context.launchers = tuple(name for name in args.launchers.split(",") if name)
            if args.devices is not None and context.xpu:
                context.devices = min(args.devices, context.devices)
            context.extra.update(comm_options)

        def progress(result: Check) -> None:
            print(f"validate {args.level}: {result.name}: {result.status} ({result.seconds:.1f} s): {result.reason}",
                  flush=True)

        checks = run_checks(context, only, progress, level=args.level)
    from lightning_xpu.validation.comms_report import write_pictures

    pictures = write_pictures(checks, markdown_path or json_path)
    found = versions()
    from lightning_xpu.diagnosis import driver_facts

    found.update(driver_facts())
    report = Report("validation", found, level=args.level, checks=checks, environment=relevant_environment(),
                    notes=notes)
    # The smoke level's device report is its `devices` check's detail: it never asks torch for XPU otherwise.
    if args.level == "site" and context.xpu:
        from lightning_xpu.diagnosis import collective_backend

        found["xpu_collective_backend"] = collective_backend()[0]
        report.devices = device_facts(context.devices)
        report.notes.append(f"{context.nodes} node(s), {context.devices} device(s) per node")
    elif args.level == "site":
        report.notes.append(context.unusable)
    report.write(json_path, markdown_path)
    summary = report.summary()
    where = f"{json_path} and {markdown_path}" if markdown_path else str(json_path)
    print(f"validate: {summary[PASS]} passed, {summary[FAIL]} failed, {summary[SKIP]} skipped; report: {where}")
    if args.level == "site":  # the site report goes back to the project, as one file
        from lightning_xpu.validation.bundle import write_bundle

        bundle = write_bundle(json_path, [path for path in (markdown_path, *pictures) if path is not None])
        print(f"validate: send {bundle} back with the 'Validation report' issue template"
              " (.github/ISSUE_TEMPLATE/validation-report.md): the Markdown pasted in, this file attached")
    return 0 if report.ok else 1


def cmd_report(args: argparse.Namespace) -> int:
    from lightning_xpu.patch_report import print_patch_report

    print_patch_report()
    return 0


def cmd_user_env(args: argparse.Namespace) -> int:
    from lightning_xpu.commands import userenv

    return userenv.run(args)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="lightning-xpu", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="{doctor,validate,report,user-env,kernel}")
    doctor = sub.add_parser("doctor", help="print the full picture of this machine and environment")
    doctor.add_argument("--json", type=Path, help="also write the doctor report as JSON")
    doctor.set_defaults(run=cmd_doctor)
    validate = sub.add_parser("validate", help="run a level's validation checks; write JSON (+ Markdown)")
    validate.add_argument("--level", choices=LEVELS, default="site",
                          help="smoke: the install's smoke job (an environment can train); site (default): the"
                               " site validation job's XPU checks")
    validate.add_argument("--json", type=Path,
                          help="JSON report (default: site ./lightning-xpu-validation-<date>.json; smoke"
                               " $XDG_STATE_HOME/lightning-xpu/smoke-<tag>-<date>.json, ~/.local/state by default)")
    validate.add_argument("--markdown", type=Path,
                          help="Markdown report (default: site the JSON path with .md; smoke none)")
    validate.add_argument("--require-xpu", action="store_true",
                          help="smoke: fail unless the fits ran on an XPU device (default: when the xpu variant is"
                               " loaded)")
    validate.add_argument("--out", type=Path, metavar="DIR",
                          help="site: write DIR/validation.json and DIR/validation.md (default with --site-job:"
                               " <submit directory>/lightning-xpu-validation-<job id or date>)")
    validate.add_argument("--nodes", metavar="N",
                          help="site: nodes of the allocation to use (default 1; with --site-job 1 or 2, default the"
                               " allocation's from PBS_NODEFILE or SLURM_JOB_NUM_NODES, at most 2)")
    validate.add_argument("--devices", metavar="N", help="site: devices (tiles) per node to use (default: all"
                                                         " visible)")
    validate.add_argument("--launchers", default="srun,mpiexec", metavar="LIST",
                          help="site: the site's launchers for the launched checks (default srun,mpiexec; the site's"
                               " job passes its own, recipes/sites/<site>.toml [validation])")
    validate.add_argument("--only", metavar="CHECKS", help="comma-separated check names (see --list)")
    validate.add_argument("--comm-max-bytes", metavar="SIZE",
                          help="site: the communication check's largest message (default 1GiB on XPU, 64KiB where"
                               " gloo stands in on CPU; e.g. 64MiB where memory is short)")
    validate.add_argument("--comm-deadline", metavar="SECONDS",
                          help="site: each communication attempt's deadline (default 600 on XPU, 120 on CPU); a"
                               " failed or hung attempt moves on to the next documented alternative")
    validate.add_argument("--link-gbps", metavar="GBITS",
                          help="site: the nominal bandwidth of the link between nodes, Gbit/s (the site file's"
                               " [validation] link_gbps)")
    validate.add_argument("--node-link-gbps", metavar="GBITS",
                          help="site: the nominal bandwidth between the devices of one node, Gbit/s"
                               " ([validation] node_link_gbps)")
    validate.add_argument("--site-job", metavar="NAME",
                          help="run as the site validation job NAME (<prefix>/validate_lightning.sh, which loads the"
                               " environment, then hands over): defaults from the allocation (--nodes, --out),"
                               " bad input one line 'NAME: ...', exit status 2")
    validate.add_argument("--list", action="store_true", help="list the checks and exit")
    validate.set_defaults(run=cmd_validate)
    report = sub.add_parser("report", help="print the patch report (as lightning_xpu.report())")
    report.set_defaults(run=cmd_report)
    user_env = sub.add_parser("user-env", help="make your writable layer over this environment (pip/uv install"
                                               " there; $LIGHTNING_XPU_USER_BASE/<tag>, default"
                                               " ~/.local/lightning-xpu/<tag>)")
    user_env.add_argument("--print-path", action="store_true", help="print the layer's path and exit")
    user_env.set_defaults(run=cmd_user_env)
    from lightning_xpu.commands import kernel

    kernel.add_parser(sub)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
