"""``inductor-knobs ablate``: reproducible knob ablations (spec, workloads, worker, runner, report)."""
