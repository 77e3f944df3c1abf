# Shared helpers of the launchers in tpu_scripts/ (sourced, not run).

# require_env VAR...: exits 1, naming every unset or empty variable, if any is missing.
require_env() {
  local missing=() var
  for var in "$@"; do
    if [[ -z "${!var:-}" ]]; then
      missing+=("${var}")
    fi
  done
  if (( ${#missing[@]} )); then
    echo "$(basename "$0"): missing required environment variable(s): ${missing[*]}" >&2
    echo "Set them, e.g.: TPU_NAME=my-tpu MODEL_DIR=gs://my-bucket/run DATA_DIR=gs://my-bucket/data $(basename "$0") ..." >&2
    echo "(TPU_NAME=local on a TPU VM; see docs/model_garden.md.)" >&2
    exit 1
  fi
}

# shell_quote ARG: ARG as it would be typed in a POSIX shell (single-quoted if needed).
shell_quote() {
  if [[ "$1" =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then
    printf '%s' "$1"
  else
    printf "'%s'" "${1//\'/\'\\\'\'}"
  fi
}

# run_cmd ARG...: prints the command (copy-pasteable) on one line, then runs it unless
# DRY_RUN=1.
run_cmd() {
  local arg line="+"
  for arg in "$@"; do
    line+=" $(shell_quote "${arg}")"
  done
  printf '%s\n' "${line}"
  if [[ "${DRY_RUN:-0}" != "1" ]]; then
    "$@"
  fi
}
