#!/usr/bin/env bash
# Issue 13's GPU checks, stage by stage, on a machine with a CUDA device and a Python that holds
# a CUDA build of PyTorch but maybe not aiotsim's pure-Python dependencies (simpy, mlxtend,
# tomli-w): it installs those from wheels in .whl/ (`make gpu-wheels` downloads them on a machine
# with an index) into /tmp/site, and imports aiotsim from this checkout.
#
#   bash tools/gpu_checks.sh env tests        # one or more stages, in order
#   bash tools/gpu_checks.sh lease            # issue 13's targets within one 10-minute call (below)
#   bash tools/gpu_checks.sh all              # every stage (far longer than one 10-minute call)
#
# A lent GPU machine gives a task 15 minutes of device time in all, its start (minutes) included,
# and one call at most 10 minutes: `lease` runs the stages that measure issue 13's targets, the
# cheapest and most telling first (env cumsum tests scale10k scale1k), each under its own time
# limit (STAGE_LIMITS below, 510 s in all), so that one slow stage cannot take the others' time
# and what finished is in $OUT. Call it with a device timeout of about 540 s, and carry .whl.
# GPU_STAGE_LIMIT_S=N sets every stage's limit to N seconds instead (0: none, the default
# outside `lease`).
#
# Stages (each writes its output to $OUT/<stage>.txt as well; OUT defaults to /tmp/gpu_checks):
#   env         nvidia-smi, torch's CUDA build and device, the wheels installed
#   tests       the CUDA tests (pytest -k cuda): every one of them must pass, none skip
#   batched     benchmarks/batched.py --device cuda --nodes 10,100,1000 (looped vs batched per round)
#   scale1k     benchmarks/scale.py --device cuda, 1,000 nodes, batched and looped
#               (the target: batched >= 10x faster per iteration)
#   scale10k    benchmarks/scale.py --device cuda, 10,000 nodes x 20 iterations, star none, once,
#               without the bare loops' literal variant (the target: under 30 s, under 8 GB)
#   host_reads  benchmarks/host_reads.py --chunk 1000 (device -> host reads in the hot loop)
#   server_ops  benchmarks/server_ops.py (torch operations per message at the server)
#   cumsum      whether CUDA's float64 cumsum along dim 0 adds each column in order, as the CPU's
#               does (the streamed aggregation's scan relies on it for the per-message adds' bits)
# Exit: 2 without a CUDA device or a usage error, else the first failing stage's status.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_checks}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1

stages=("$@")
STAGES="env tests batched scale1k scale10k host_reads server_ops cumsum all lease"
# seconds each stage may take under `lease` (timeout(1) stops it there; its output so far is kept).
# Estimates, not yet run on a GPU: scale10k prints its one line only at the end of the run (20
# iterations, target 30 s) and of its bare work (the same batched passes, about as long), after
# 10,000 nodes are built, so it gets the most; scale1k's looped runs are 3,000 gradients each.
declare -A STAGE_LIMITS=([env]=30 [cumsum]=30 [tests]=90 [scale10k]=210 [scale1k]=150)
if [ ${#stages[@]} -eq 0 ]; then
    echo "usage: bash tools/gpu_checks.sh STAGE... (stages: $STAGES)" >&2
    exit 2
fi
lease=0
case "${stages[0]}" in
    all) stages=(env tests cumsum batched host_reads server_ops scale1k scale10k) ;;
    lease) stages=(env cumsum tests scale10k scale1k); lease=1 ;;
esac
for s in "${stages[@]}"; do
    case " $STAGES " in *" $s "*) ;; *) echo "unknown stage '$s' (stages: $STAGES)" >&2; exit 2 ;; esac
done
LIMIT=${GPU_STAGE_LIMIT_S:-}
if [ -n "$LIMIT" ] && ! [[ "$LIMIT" =~ ^[0-9]+$ ]]; then
    echo "GPU_STAGE_LIMIT_S must be a whole number of seconds (0: no limit), got '$LIMIT'" >&2
    exit 2
fi
limit_of() {  # limit_of STAGE: its time limit in seconds (0: none)
    if [ -n "$LIMIT" ]; then echo "$LIMIT"
    elif [ "$lease" -eq 1 ]; then echo "${STAGE_LIMITS[$1]:-0}"
    else echo 0
    fi
}

if ! "$PY" -c "import simpy, mlxtend, tomli_w" 2>/dev/null; then
    if ! ls .whl/*.whl >/dev/null 2>&1; then
        echo "simpy, mlxtend or tomli-w is missing and .whl/ holds no wheels:" \
            "run 'make gpu-wheels' where pip has an index, and carry .whl" >&2
        exit 2
    fi
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl || exit 2
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "no CUDA device: torch.cuda.is_available() is False (run this on the GPU machine)" >&2
    exit 2
fi

stage() {  # stage NAME: run it, its output to the terminal and to $OUT/NAME.txt
    case "$1" in
    env)
        nvidia-smi
        "$PY" -c "import torch, simpy; print('torch', torch.__version__, 'CUDA', torch.version.cuda)
print('device', torch.cuda.get_device_name(0)); print('simpy', simpy.__version__)" ;;
    tests) "$PY" -m pytest -q -p no:cacheprovider -k cuda -rs tests ;;
    batched) "$PY" benchmarks/batched.py --device cuda --nodes 10,100,1000 ;;
    scale1k)
        local common=(--device cuda --nodes 1000 --codecs none topk --topologies star --no-loop)
        "$PY" benchmarks/scale.py "${common[@]}" \
            && "$PY" benchmarks/scale.py "${common[@]}" --batched false --repeats 1 ;;
    scale10k)
        "$PY" benchmarks/scale.py --device cuda --nodes 10000 --codecs none --topologies star --iterations 20 \
            --repeats 1 --no-loop ;;
    host_reads) "$PY" benchmarks/host_reads.py --chunk 1000 ;;
    server_ops) "$PY" benchmarks/server_ops.py ;;
    cumsum) "$PY" - <<'EOF'
import torch
# float64, as the streamed aggregation's scan (Codec.aggregate_add_rows) runs it; large spread:
# another order of the adds changes the sums
f64 = {"device": "cuda", "dtype": torch.float64}
x = torch.randn(4096, 3000, **f64) * torch.logspace(-8, 8, 3000, **f64)
seq = torch.empty_like(x)
acc = torch.zeros(x.shape[1], **f64)
for i in range(x.shape[0]):  # each column added in row order, one row at a time
    acc = acc + x[i]
    seq[i] = acc
out = x.cumsum(dim=0)
print("cumsum along dim 0 equals the in-order sums:", bool(torch.equal(out, seq)),
      "| largest difference:", float((out - seq).abs().max()))
EOF
    ;;
    *) echo "unknown stage '$1' (stages: $STAGES)" >&2; return 2 ;;
    esac
}

status=0
export -f stage  # a child bash runs each stage, so that timeout can stop it and its children
export PY OUT
for s in "${stages[@]}"; do
    limit=$(limit_of "$s")
    echo "=== $s ($(date -u +%H:%M:%S)$([ "$limit" -gt 0 ] && echo ", limit ${limit} s"))"
    # a limit of 0 is timeout(1)'s "no limit"
    timeout --kill-after=10 "$limit" bash -c 'stage "$1"' _ "$s" 2>&1 | tee "$OUT/$s.txt"
    rc=${PIPESTATUS[0]}
    [ "$rc" -eq 124 ] && echo "=== $s: stopped at its limit of ${limit} s (what it printed is above and in $OUT/$s.txt)"
    echo "=== $s: exit $rc"
    [ "$rc" -ne 0 ] && [ "$status" -eq 0 ] && status=$rc
done
exit "$status"
