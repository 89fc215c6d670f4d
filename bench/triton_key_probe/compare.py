# ruff: noqa - a throwaway probe, kept only in this commit of the experiment
"""Compare the parent's and the workers' Triton cache-key parts that sitecustomize.py logged (argument: the log)."""

import collections
import json
import sys

recs = [json.loads(l) for l in open(sys.argv[1])]
print(len(recs), "records;", collections.Counter(r.get("pid") for r in recs).most_common(3))
errs = [r for r in recs if "err" in r or "no_get_cache_key" in r]
print("errors", errs[:3])
recs = [r for r in recs if "src" in r]
parent = collections.Counter(r["pid"] for r in recs).most_common(1)[0][0]
by = collections.defaultdict(list)
for r in recs:
    by[
        (
            r["name"],
            json.dumps(r["constants"], sort_keys=True),
            r["opts"].split("num_warps=")[1][:3] if "num_warps=" in r["opts"] else "",
        )
    ].append(r)
shown = 0
for k, rs in by.items():
    pids = {r["pid"] == parent for r in rs}
    if len(pids) == 2 and shown < 2:
        shown += 1
        p = [r for r in rs if r["pid"] == parent][0]
        w = [r for r in rs if r["pid"] != parent][0]
        for f in ("src", "backend", "options", "env", "fn_key", "attrs", "sig", "opts"):
            if p[f] != w[f]:
                print("DIFF", f, "\n  parent:", str(p[f])[:1500], "\n  worker:", str(w[f])[:1500])
        print("same key group", k[0][:40], "matched fields other than above")
print("groups with both", sum(1 for rs in by.values() if len({r["pid"] == parent for r in rs}) == 2), "of", len(by))
