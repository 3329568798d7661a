#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one run: the fused kernels' GPU tests, the KDA
# snapshot/restore check against the pinned wheel's Triton kernels, the kernel timings, and,
# with an engine serving the model, its image path (python -m bench images-device: prompt
# tokens per image size against the gateway's formula, vision time, the reordered tool
# results colour test through the gateway).
# Needs python3 with CUDA torch, Triton, pytest and httpx; sglang-kt need not be installed
# (its sources come from the unzipped wheel under .cache/, as in the CPU tests). The image
# step needs the project's own dependencies (pip install -e .) and a running engine:
#
#   ENGINE_URL   the engine's base URL (e.g. http://127.0.0.1:30000); unset: step skipped
#   GATEWAY_URL  a gateway in front of it, for the colour test; unset: that test skipped
#   API_KEY, ENGINE_API_KEY   the gateway's and the engine's API keys, when they have them
#
#   scripts/device-checks.sh [LOG_DIR]        (make device-checks)
#
# Logs go to LOG_DIR (default: $OUT when set, else device-results/); exit status 0 when
# every step passed (a skipped step is listed as such). Each step has its own time limit so
# one hang cannot eat the others.
set -u
log_dir=${1:-${OUT:-device-results}}
mkdir -p "$log_dir"
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1

step() {  # step NAME SECONDS COMMAND...: run with a limit, log, print the log's end
    local name=$1 limit=$2 rc lines=${STEP_TAIL_LINES:-30}
    shift 2
    rm -f "$log_dir/$name.skipped"
    timeout "$limit" "$@" >"$log_dir/$name.log" 2>&1
    rc=$?
    echo "== $name (rc=$rc)"
    tail -n "$lines" "$log_dir/$name.log"
    echo "$rc" >"$log_dir/$name.rc"
}

skip() {  # skip NAME REASON: a step that cannot run here; rc 0, listed as skipped
    local name=$1 reason=$2
    echo "SKIPPED: $reason" | tee "$log_dir/$name.log"
    echo "== $name (skipped)"
    echo 0 >"$log_dir/$name.rc"
    : >"$log_dir/$name.skipped"
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

# Last and alone, so the kernel steps on the same GPU cannot disturb its timings. 6 sizes x
# 3 repeats, the probe and the colour test: 6-10 minutes at the uncalibrated ~130 tok/s hybrid
# rate (MEDIA.md 5.2); the limit leaves room for a slower host.
if [ -n "${ENGINE_URL:-}" ]; then
    # Its summary is ~60 lines: show all of it, not the usual last 30.
    STEP_TAIL_LINES=100 step images 1800 "$py" -m bench images-device --engine "$ENGINE_URL" \
        ${GATEWAY_URL:+--gateway "$GATEWAY_URL"} ${API_KEY:+--api-key "$API_KEY"} \
        ${ENGINE_API_KEY:+--engine-api-key "$ENGINE_API_KEY"} --out "$log_dir/images.json"
else
    skip images "the image checks need a running engine serving the model: set ENGINE_URL (and GATEWAY_URL for the colour test)"
fi

failed=$(grep -Lx 0 "$log_dir"/*.rc | xargs -r -n1 basename | sed 's/\.rc$//')
skipped=$(find "$log_dir" -maxdepth 1 -name '*.skipped' -printf '%f\n' | sed 's/\.skipped$//' | sort)
if [ -n "$skipped" ]; then
    echo "SKIPPED (not run, not failed):" $skipped
fi
if [ -n "$failed" ]; then
    echo "FAILED:" $failed
    exit 1
fi
echo "all device checks${skipped:+ that ran} passed"
