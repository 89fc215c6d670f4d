"""``inductor-knobs ablate`` with the phase barrier's live cap fixed: how the batch size of the quiet barrier
(:func:`inductor_knobs.ablation.quiet.live_cap`) moves the main job's wall time.

    python bench/ablate_cap.py 18 ablate --out /tmp/main --overwrite    # one batch of 18 live workers

The first argument is the cap (live workers per GPU); the rest is ``inductor-knobs``'s command line.
"""

import sys

from inductor_knobs.ablation import runner
from inductor_knobs.cli import main

if __name__ == "__main__":
    cap = int(sys.argv[1])
    runner.live_cap = lambda parallel, jobs, lanes=1, gpu_gib=None: max(cap, parallel)
    sys.exit(main(sys.argv[2:]))
