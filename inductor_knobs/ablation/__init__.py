"""``inductor-knobs ablate``: reproducible knob ablations.

The command: :mod:`.options` (the command line), :mod:`.build` and :mod:`.main_job` (the plan),
:mod:`.outdir` (``--out``), :mod:`.command` (the subcommand).  What runs: :mod:`.plan`, :mod:`.spec`
(arms), :mod:`.workloads` and :mod:`.models`, :mod:`.worker` (one run's process), :mod:`.workers`
(its environment and directories; where every worker starts), :mod:`.processes` (a started worker),
:mod:`.forkserver`, :mod:`.zygote` and :mod:`.preload` (start-up paid once: runs forked from a server
that imported torch), :mod:`.quiet` (latency measured while nothing compiles), :mod:`.job` (the job function),
:mod:`.runner` (the local executor), :mod:`.slurm` and :mod:`.slurm_options` (the Slurm executor), :mod:`.signals`,
:mod:`.store` (``<out>/runs``).  The results: :mod:`.summary`, :mod:`.stats`, :mod:`.load`,
:mod:`.kernels`, :mod:`.explain`, :mod:`.report` (Markdown), :mod:`.files` (``--out``'s files),
:mod:`.plot`, :mod:`.compare`, :mod:`.merge`.  Its errors and the check of its extra: :mod:`.errors`.
"""
