#!/usr/bin/env bash
# The harness's own tests on every supported torch release this machine has an environment for.
#
#   scripts/version-matrix.sh [extra pytest args]      e.g. scripts/version-matrix.sh -x
#
# For each release (DETCONF_VERSIONS, default "2.5.1 2.11.0 2.13.0 2.14.1 2.15.0") the interpreter is
# the first of:
#   $DETCONF_PYTHON_<release with _ for .>   (DETCONF_PYTHON_2_5_1=/path/to/bin/python)
#   .venv-torch-<release>/bin/python          (the README's "without tox" environments)
#   .tox/torch-<release>/bin/python           (tox -e torch-<release>)
#   /tmp/venv-<release>/bin/python, /tmp/venv-<release without dots>/bin/python (/tmp/venv-251)
#   python3 on PATH
# whose torch is that release (a local label such as +cpu or +cu124 does not matter). A release
# with no such interpreter is skipped, and the script says so. Each found one runs
#   python -m pytest tests -n "${DETCONF_WORKERS:-auto}" -p no:cacheprovider -q [extra args]
# one release after another, with its log in ${DETCONF_MATRIX_OUT:-reports/out/version-matrix}/
# torch-<release>.log, and prints one line per release with its counts. Exit status: 0 when every
# release that ran passed, 1 when one failed, 2 when no release could run.
set -uo pipefail
cd "$(dirname "$0")/.."

versions=${DETCONF_VERSIONS:-"2.5.1 2.11.0 2.13.0 2.14.1 2.15.0"}
workers=${DETCONF_WORKERS:-auto}
out=${DETCONF_MATRIX_OUT:-reports/out/version-matrix}
mkdir -p "$out"

# The torch release of interpreter $1 (2.5.1 for 2.5.1+cu124), empty when it has none.
torch_release() {
    "$1" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null | tail -n 1
}

# Sets $python to the interpreter for release $1 (empty when none) and $notes to why the one its
# variable names was passed over.
find_python() {
    local release=$1 var compact candidate found
    var="DETCONF_PYTHON_${release//./_}"
    compact=${release//./}
    python=""
    notes=""
    if [ -n "${!var:-}" ] && [ ! -x "${!var}" ]; then
        notes="; \$$var=${!var} is not an executable"
    fi
    for candidate in "${!var:-}" ".venv-torch-$release/bin/python" ".tox/torch-$release/bin/python" \
                     "/tmp/venv-$release/bin/python" "/tmp/venv-$compact/bin/python" "$(command -v python3 || true)"; do
        [ -n "$candidate" ] && [ -x "$candidate" ] || continue
        found=$(torch_release "$candidate")
        if [ "$found" = "$release" ]; then
            python=$candidate
            return
        fi
        if [ "$candidate" = "${!var:-}" ]; then
            notes="; \$$var=$candidate has torch ${found:-none}"
        fi
    done
}

declare -a lines
ran=0
failed=0
for release in $versions; do
    find_python "$release"
    if [ -z "$python" ]; then
        var="DETCONF_PYTHON_${release//./_}"
        lines+=("torch $release: skipped, no environment found (set \$$var, or create .venv-torch-$release)$notes")
        continue
    fi
    log="$out/torch-$release.log"
    version=$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null | tail -n 1)
    shown=""
    [ "$#" -gt 0 ] && printf -v shown ' %q' "$@"
    echo "version-matrix: torch $version ($python): python -m pytest tests -n $workers -p no:cacheprovider -q$shown" >&2
    started=$(date +%s)
    "$python" -m pytest tests -n "$workers" -p no:cacheprovider -q "$@" >"$log" 2>&1
    status=$?
    seconds=$(( $(date +%s) - started ))
    ran=$((ran + 1))
    # pytest's closing line: "1290 passed, 9 skipped, 2 xfailed, 3 warnings in 812.33s"
    summary=$(grep -E '[0-9]+ (passed|failed|errors?|skipped)' "$log" | tail -n 1)
    count() { grep -Eo "[0-9]+ $1" <<<"$summary" | head -n 1 | cut -d' ' -f1; }
    passed=$(count passed); fails=$(count failed); skipped=$(count skipped); errors=$(count 'errors?')
    xfailed=$(count xfailed)
    line="torch $release ($version, $python): ${passed:-0} passed, ${fails:-0} failed, ${skipped:-0} skipped"
    [ -n "$errors" ] && line="$line, $errors errors"
    [ -n "$xfailed" ] && line="$line, $xfailed xfailed"
    line="$line in ${seconds}s, exit status $status; log: $log"
    if [ "$status" -ne 0 ] || [ -n "$fails" ] || [ -n "$errors" ]; then
        failed=$((failed + 1))
        line="$line  FAILED"
    fi
    lines+=("$line")
done

printf '%s\n' "${lines[@]}"
if [ "$ran" -eq 0 ]; then
    echo "version-matrix: no torch environment found for any of: $versions" >&2
    exit 2
fi
if [ "$failed" -ne 0 ]; then
    echo "version-matrix: $failed of $ran torch release(s) failed" >&2
    exit 1
fi
echo "version-matrix: every torch release that ran passed ($ran)" >&2
