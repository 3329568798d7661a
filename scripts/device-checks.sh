#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one run: the fused kernels' GPU tests, the KDA
# snapshot/restore check against the pinned wheel's Triton kernels, and the kernel timings.
# Needs python3 with CUDA torch, Triton, pytest and httpx; sglang-kt need not be installed
# (its sources come from the unzipped wheel under .cache/, as in the CPU tests).
#
#   scripts/device-checks.sh [LOG_DIR]        (make device-checks)
#
# Logs go to LOG_DIR (default: $OUT when set, else device-results/); exit status 0 when
# every step passed. Each step has its own time limit so one hang cannot eat the others.
set -u
log_dir=${1:-${OUT:-device-results}}
mkdir -p "$log_dir"
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1

step() {  # step NAME SECONDS COMMAND...: run with a limit, log, print the log's end
    local name=$1 limit=$2 rc
    shift 2
    timeout "$limit" "$@" >"$log_dir/$name.log" 2>&1
    rc=$?
    echo "== $name (rc=$rc)"
    tail -n 30 "$log_dir/$name.log"
    echo "$rc" >"$log_dir/$name.rc"
}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader
"$py" -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'

# The tests and the snapshot check compile Triton kernels (CPU-bound): run them side by side.
# The timings run alone afterwards.
step kernels-tests 180 env TRITON_INTERPRET=0 "$py" -m pytest -q -p no:cacheprovider \
    -m gpu tests/engine/kernels &
step prefix-cache 240 "$py" -m tests.engine.prefix_cache.device_run &
wait
step kernels-bench-1 90 "$py" -m bench kernels --tokens 1
step kernels-bench-64 90 "$py" -m bench kernels --tokens 64

failed=$(grep -Lx 0 "$log_dir"/*.rc | xargs -r -n1 basename | sed 's/\.rc$//')
if [ -n "$failed" ]; then
    echo "FAILED:" $failed
    exit 1
fi
echo "all device checks passed"
