#!/usr/bin/env bash
# Runs on the GPU host (the device machine), from the repository root, with the bundle made by
# lab/gpu/bundle.sh under .gpu-kit/ (p1 in a first call, p2 in the next, back to back).
#   bash lab/gpu/device.sh part1          # verify p1, unpack _C_stable_libtorch to /root/kit, report the host
#   bash lab/gpu/device.sh setup          # verify p2, unpack the tree, install the wheels (once per machine)
#   bash lab/gpu/device.sh env            # print the exports that put the bundle on PYTHONPATH
# then e.g.:  eval "$(bash lab/gpu/device.sh env)"; python3 -m proxima_bench.engine.ab ...
set -uo pipefail
KIT=${KIT:-.gpu-kit}
ROOT=/root/proxima
mode=${1:-}

verify() { (cd "$KIT/$1" && sha256sum -c --quiet SHA256SUMS) || { echo "bundle part $1 is corrupt or incomplete"; exit 2; }; }

case $mode in
  part1)
    verify p1
    mkdir -p /root/kit
    python3 -c "import lzma,shutil;shutil.copyfileobj(lzma.open('$KIT/p1/c_stable.xz'),open('/root/kit/_C_stable_libtorch.abi3.so','wb'),1<<24)" || exit 1
    ls -la /root/kit
    nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv
    python3 -c "import torch,sys;print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"
    nproc; free -g | head -2
    ;;
  setup)
    [ -f /root/kit/_C_stable_libtorch.abi3.so ] || { echo "NO PART1: the machine was not kept; start again with part1"; exit 2; }
    if [ -f $ROOT/.setup_done ]; then echo "setup already done"; exit 0; fi
    verify p2
    t=$(date +%s)
    rm -rf $ROOT; mkdir -p $ROOT/vt $ROOT/site
    python3 - <<PY || exit 1
import lzma, tarfile, shutil
tarfile.open('$KIT/p2/pysrc.tar.xz').extractall('$ROOT/vt', filter='data')
shutil.copyfileobj(lzma.open('$KIT/p2/fa3.xz'), open('$ROOT/vt/vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so', 'wb'), 1 << 24)
PY
    cp /root/kit/_C_stable_libtorch.abi3.so $ROOT/vt/vllm/ || exit 1
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $ROOT/site "$KIT"/p2/whl/*.whl 2>&1 | grep -v -i warning | tail -5
    touch $ROOT/.setup_done
    echo "setup took $(( $(date +%s) - t )) s"
    ;;
  env)
    cat <<ENV
export PYTHONPATH=$ROOT/vt:$ROOT/site
export PYTHONUNBUFFERED=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export VLLM_USE_FLASHINFER_SAMPLER=0
ENV
    ;;
  *) echo "usage: $0 part1|setup|env"; exit 1 ;;
esac
