# Sourced by tests/run and .ci/run: `step NAME` starts a step (and ends the one before),
# `steps_done` ends the last and prints every step's time, so a run's log says where its time
# went.
_step_name=""
_step_t0=$SECONDS
_step_times=()

step() {
  steps_end_current
  _step_name="$1"
  _step_t0=$SECONDS
  echo "== $1"
}

steps_end_current() {
  [ -n "$_step_name" ] || return 0
  local took=$((SECONDS - _step_t0))
  _step_times+=("$(printf '%6d s  %s' "$took" "$_step_name")")
  echo "   ($took s)"
  _step_name=""
}

steps_done() {
  steps_end_current
  echo "== time per step ($1)"
  printf '%s\n' "${_step_times[@]}"
  printf '%6d s  in all\n' "$SECONDS"
}
