#!/usr/bin/env bash
# BERT-large pretraining with VR-LAMB on a Cloud TPU, NVIDIA's two phases: phase 1 at
# sequence length 128, then phase 2 at 512 starting from phase 1's final checkpoint.
#
# Usage:
#   TPU_NAME=my-tpu MODEL_DIR=gs://bucket/bert DATA_DIR=gs://bucket/bert_data \
#     tpu_scripts/run_bert_pretraining.sh [VARIANT] [extra tpu_scripts/train.py flags...]
#
# VARIANT (official_configs/bert_large_vrlamb_<VARIANT>_phase{1,2}.yaml):
#   64k32k   NVIDIA's 64k/32k mixed batch, 7038 + 1563 steps (default)
#   32k      batch 32768 in both phases, 14062 + 1563 = 15625 steps
#   128k64k  128k/64k mixed batch, 3519 + 782 = 4301 steps
# Required environment:
#   TPU_NAME   the Cloud TPU (name or grpc:// address; "local" on a TPU VM)
#   MODEL_DIR  output root: phase 1 writes $MODEL_DIR/phase1, phase 2 $MODEL_DIR/phase2
#   DATA_DIR   BERT pretraining TFRecords (Model Garden's create_pretraining_data.py):
#              $DATA_DIR/seq_128_mp_20/{train,eval}/* and $DATA_DIR/seq_512_mp_80/{train,eval}/*
# Optional environment:
#   OPTIMIZER  vrgd_lamb (default) or lamb, the baseline with the same LAMB settings
#   PHASES     "1 2" (default), "1" or "2"
#   EXTRA_PARAMS_OVERRIDE  appended to --params_override (comma-separated key=value)
#   PYTHON     interpreter (default: python3)
#   DRY_RUN=1  print the commands without running them
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(dirname "${SCRIPT_DIR}")"
# shellcheck source=tpu_scripts/launch_lib.sh
source "${SCRIPT_DIR}/launch_lib.sh"

VARIANT="${1:-64k32k}"
if [[ $# -gt 0 ]]; then shift; fi
case "${VARIANT}" in
  64k32k|32k|128k64k) ;;
  *) echo "$(basename "$0"): unknown variant '${VARIANT}'; choose 64k32k, 32k or 128k64k." >&2
     exit 2 ;;
esac
OPTIMIZER="${OPTIMIZER:-vrgd_lamb}"
case "${OPTIMIZER}" in
  vrgd_lamb|lamb) ;;
  *) echo "$(basename "$0"): OPTIMIZER must be vrgd_lamb or lamb, not '${OPTIMIZER}'." >&2
     exit 2 ;;
esac
require_env TPU_NAME MODEL_DIR DATA_DIR

PYTHON="${PYTHON:-python3}"
PHASES="${PHASES:-1 2}"
for phase in ${PHASES}; do
  case "${phase}" in
    1) seq=128; mp=20; mode=train; init="" ;;
    2) seq=512; mp=80; mode=train_and_eval; init=",task.init_checkpoint=${MODEL_DIR}/phase1" ;;
    *) echo "$(basename "$0"): PHASES may hold 1 and 2, not '${phase}'." >&2; exit 2 ;;
  esac
  data="${DATA_DIR}/seq_${seq}_mp_${mp}"
  override="task.train_data.input_path=${data}/train/*,task.validation_data.input_path=${data}/eval/*${init}"
  override+=",trainer.optimizer_config.optimizer.type=${OPTIMIZER}"
  if [[ -n "${EXTRA_PARAMS_OVERRIDE:-}" ]]; then
    override+=",${EXTRA_PARAMS_OVERRIDE}"
  fi
  echo "BERT-large ${VARIANT}, phase ${phase} of 2 (sequence length ${seq}), ${OPTIMIZER}:"
  run_cmd "${PYTHON}" "${REPO_DIR}/tpu_scripts/train.py" \
    --experiment=vrgd_bert_pretraining \
    --mode="${mode}" \
    --tpu="${TPU_NAME}" \
    --model_dir="${MODEL_DIR}/phase${phase}" \
    --config_file="${REPO_DIR}/official_configs/bert_large_vrlamb_${VARIANT}_phase${phase}.yaml" \
    --params_override="${override}" \
    "$@"
done
