#!/usr/bin/env bash
# ResNet-50 on ImageNet with VR-LARS on a Cloud TPU (MLPerf LARS recipe, 90 epochs).
#
# Usage:
#   TPU_NAME=my-tpu MODEL_DIR=gs://bucket/resnet DATA_DIR=gs://bucket/imagenet \
#     tpu_scripts/run_resnet.sh [VARIANT] [extra tpu_scripts/train.py flags...]
#
# VARIANT (official_configs/resnet50_vrlars_<VARIANT>.yaml): global batch
#   32k (32768, default), 64k (65536) or 96k (98304).
# Required environment:
#   TPU_NAME   the Cloud TPU (name or grpc:// address; "local" on a TPU VM)
#   MODEL_DIR  checkpoints and summaries
#   DATA_DIR   ImageNet TFRecords in Model Garden's classification format:
#              $DATA_DIR/train* and $DATA_DIR/valid*
# Optional environment:
#   OPTIMIZER  vrgd_lars (default) or lars, the baseline with the same LARS settings
#   EXTRA_PARAMS_OVERRIDE  appended to --params_override (comma-separated key=value)
#   PYTHON     interpreter (default: python3)
#   DRY_RUN=1  print the command without running it
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(dirname "${SCRIPT_DIR}")"
# shellcheck source=tpu_scripts/launch_lib.sh
source "${SCRIPT_DIR}/launch_lib.sh"

VARIANT="${1:-32k}"
if [[ $# -gt 0 ]]; then shift; fi
case "${VARIANT}" in
  32k|64k|96k) ;;
  *) echo "$(basename "$0"): unknown variant '${VARIANT}'; choose 32k, 64k or 96k." >&2
     exit 2 ;;
esac
OPTIMIZER="${OPTIMIZER:-vrgd_lars}"
case "${OPTIMIZER}" in
  vrgd_lars|lars) ;;
  *) echo "$(basename "$0"): OPTIMIZER must be vrgd_lars or lars, not '${OPTIMIZER}'." >&2
     exit 2 ;;
esac
require_env TPU_NAME MODEL_DIR DATA_DIR

PYTHON="${PYTHON:-python3}"
override="task.train_data.input_path=${DATA_DIR}/train*,task.validation_data.input_path=${DATA_DIR}/valid*"
override+=",trainer.optimizer_config.optimizer.type=${OPTIMIZER}"
if [[ -n "${EXTRA_PARAMS_OVERRIDE:-}" ]]; then
  override+=",${EXTRA_PARAMS_OVERRIDE}"
fi
echo "ResNet-50 ImageNet, batch ${VARIANT}, ${OPTIMIZER}:"
run_cmd "${PYTHON}" "${REPO_DIR}/tpu_scripts/train.py" \
  --experiment=vrgd_resnet_imagenet \
  --mode=train_and_eval \
  --tpu="${TPU_NAME}" \
  --model_dir="${MODEL_DIR}" \
  --config_file="${REPO_DIR}/official_configs/resnet50_vrlars_${VARIANT}.yaml" \
  --params_override="${override}" \
  "$@"
