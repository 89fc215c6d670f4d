"""The ``inductor-knobs`` command line: errors print one line and exit 2, no traceback; ``doctor`` exits 1 on a
bad ``INDUCTOR_KNOBS_*`` variable (the report still prints), its serving section from
:mod:`inductor_knobs.serving.first_call_costs`; ``ablate`` is :mod:`inductor_knobs.ablation.command`."""

from __future__ import annotations

import argparse
import json
import sys

from .errors import KnobsError

OK, BAD_SETUP, ERR = 0, 1, 2

DESCRIPTION = (
    "Safe, reversible knobs for PyTorch TorchInductor (torch 2.4-2.15): open the 68-SM GEMM-autotuning gate "
    "(is_big_gpu) on smaller GPUs, pick max_autotune_gemm_backends, toggle coordinate-descent tuning, CUDA graphs "
    "and tracing, from code (ik.knobs), INDUCTOR_KNOBS_* variables or here. 'doctor' shows what this machine, torch "
    "and environment mean for the knobs (the SM gate per GPU, usable GEMM backends, what beats a knob); 'ablate' "
    "measures Inductor settings against each other, each arm in fresh processes with attested settings."
)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 on success, 2 on a KnobsError)."""
    from . import __version__

    parser = argparse.ArgumentParser(prog="inductor-knobs", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"inductor-knobs {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    doctor = sub.add_parser("doctor", help="versions, patch module, GPUs and the SM gate, backends, env, modes")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.add_argument("--min-sms", type=int, default=None, help="also show the gate verdict at this threshold")
    from .ablation.options import add_parser as add_ablate_parser

    add_ablate_parser(sub)
    args = parser.parse_args(argv)
    try:
        if args.command == "ablate":
            from .ablation import command as ablate

            return ablate.run(args)
        from . import doctor as doctor_mod
        from .serving import first_call_costs

        report = doctor_mod.collect(min_sms=args.min_sms)
        report["serving"] = first_call_costs.doctor_section()
        text = "\n".join([doctor_mod.render(report), *first_call_costs.render_doctor_section(report["serving"])])
        print(json.dumps(report, indent=2, default=str) if args.json else text)
        if report["env"]["error"]:  # a bad INDUCTOR_KNOBS_* is an error of this machine's setup
            print(f"inductor-knobs: error: {report['env']['error']}", file=sys.stderr)
            return BAD_SETUP
    except KnobsError as err:
        print(f"inductor-knobs: error: {err}", file=sys.stderr)
        return ERR
    return OK


if __name__ == "__main__":
    sys.exit(main())
