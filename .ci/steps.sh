# shellcheck shell=bash
# The step timing both CI lanes use (sourced): `step NAME` ends the step
# before (printing its duration) and starts NAME; `end_step` ends the last
# one; `step_times` holds a line per step for the table at the end.
step_name="set-up"
step_start=$SECONDS
step_times=()
end_step() {
    local took=$((SECONDS - step_start))
    step_times+=("$(printf '%5d s  %s' "$took" "$step_name")")
    echo "-- $took s: $step_name"
}
step() {
    end_step
    step_name="$1"
    step_start=$SECONDS
    echo "== $1"
}
