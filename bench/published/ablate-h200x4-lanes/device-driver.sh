#!/bin/bash
# bash .whl/gpu.sh start WAIT_S DEADLINE_S | bash .whl/gpu.sh wait WAIT_S
# start: installs the wheel, starts bench/ablate_gpu.sh in its own session (it outlives this call),
# then waits; wait: waits.  Both end by packing /tmp/r into $OUT/r.tgz.
set -u
R=/tmp/r
if [ "$1" = start ]; then
  pip install -q --no-deps --no-index --target /tmp/site dist/*.whl .whl/*.whl > /tmp/pip.log 2>&1 || { cat /tmp/pip.log; exit 1; }
  mkdir -p /tmp/ik $R && cp bench/ablate_gpu.sh /tmp/ik/ && cp -r tests /tmp/ik/tests
  cd /tmp
  PYTHONPATH=/tmp/site OUT=$R DEADLINE_S=$3 setsid nohup bash -c 'bash /tmp/ik/ablate_gpu.sh > /tmp/r/ablate_gpu.log 2>&1; touch /tmp/done' >/dev/null 2>&1 < /dev/null &
  sleep 5
fi
deadline=$(( $(date +%s) + $2 ))
while [ ! -e /tmp/done ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 5; done
[ -e /tmp/done ] && echo DONE
nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv
tar czf "$OUT/r.tgz" -C /tmp r
cat $R/status.txt; tail -c 3000 $R/ablate_gpu.log
