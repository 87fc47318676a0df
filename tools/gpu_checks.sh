#!/usr/bin/env bash
# Issue 13's GPU checks, stage by stage, on a machine with a CUDA device and a Python that holds
# a CUDA build of PyTorch but maybe not aiotsim's pure-Python dependencies (simpy, mlxtend,
# tomli-w): it installs those from wheels in .whl/ (`make gpu-wheels` downloads them on a machine
# with an index) into /tmp/site, and imports aiotsim from this checkout.
#
#   bash tools/gpu_checks.sh env tests        # one or more stages, in order
#   bash tools/gpu_checks.sh all              # every stage (far longer than one 10-minute call)
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
STAGES="env tests batched scale1k scale10k host_reads server_ops cumsum all"
if [ ${#stages[@]} -eq 0 ]; then
    echo "usage: bash tools/gpu_checks.sh STAGE... (stages: $STAGES)" >&2
    exit 2
fi
[ "${stages[0]}" = all ] && stages=(env tests cumsum batched host_reads server_ops scale1k scale10k)
for s in "${stages[@]}"; do
    case " $STAGES " in *" $s "*) ;; *) echo "unknown stage '$s' (stages: $STAGES)" >&2; exit 2 ;; esac
done

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
for s in "${stages[@]}"; do
    echo "=== $s ($(date -u +%H:%M:%S))"
    stage "$s" 2>&1 | tee "$OUT/$s.txt"
    rc=${PIPESTATUS[0]}
    echo "=== $s: exit $rc"
    [ "$rc" -ne 0 ] && [ "$status" -eq 0 ] && status=$rc
done
exit "$status"
