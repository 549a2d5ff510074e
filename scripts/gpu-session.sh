#!/usr/bin/env bash
# A short, prepared session on a lent GPU machine (torch preinstalled, no network): what the
# suite's CUDA work still waits for, sized for a few minutes of device time, everything written
# under one folder to carry back.
#
#   scripts/gpu-session.sh OUT [STEPS [PYTEST ARGS...]]
#   e.g. scripts/gpu-session.sh "$OUT" documented,compiled,sweep,stress
#
# 1. the wheels the machine lacks, from .whl/ (bring them: `python3 -m detconf gpu-run --check`
#    there lists them; `pip download --only-binary=:all: --python-version 3.12 -d .whl ...` here),
#    installed into the interpreter by `detconf gpu-run --wheels .whl`;
# 2. `detconf gpu-run` with STEPS (default documented,compiled,sweep,stress; `tests` takes about
#    4 minutes on 16 cores: run it as a second call) into OUT/gpu-run/, its archive included;
# 3. scripts/gpu_probes.py, the independent plain-torch checks, into OUT/probes.{txt,json};
# 4. nvidia-smi and the wall time of each part into OUT/session.txt.
# The suite's commit is in the rows when the checkout's .git came along (carry it).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu-session.sh OUT [STEPS]}
steps=${2:-documented,compiled,sweep,stress}
shift $(( $# < 2 ? $# : 2 ))
extra=()
[ $# -gt 0 ] && extra=(-- "$@")
mkdir -p "$out"
log="$out/session.txt"
: > "$log"
stamp() { date -u +%Y-%m-%dT%H:%M:%SZ; }
part() {  # part NAME COMMAND...: run it, say its wall time and exit status
    local name=$1 start status
    shift
    start=$(date +%s)
    echo "$(stamp) $name: $*" | tee -a "$log"
    "$@"
    status=$?
    echo "$(stamp) $name: exit status $status after $(( $(date +%s) - start )) s" | tee -a "$log"
    return $status
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> "$log" 2>&1 || true
wheels=()
[ -d .whl ] && wheels=(--wheels .whl)
part gpu-run python3 -m detconf gpu-run "${wheels[@]}" --steps "$steps" --out "$out/gpu-run" --quiet "${extra[@]}"
run_status=$?
part probes bash -c "python3 scripts/gpu_probes.py --json '$out/probes.json' > '$out/probes.txt' 2>&1"
probe_status=$?
[ $run_status -eq 0 ] && [ $probe_status -eq 0 ]
