#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The ResNet-18 experiment of docs/results.md ("ResNet-18 on one GPU"), one command on any
# CUDA machine: examples/torch/resnet_fmnist.py trains torchvision's ResNet-18 (small-image
# stem) on Fashion-MNIST with 8 emulated workers (cpd.torch.EmulatedWorkers), fp32, e5m2,
# e4m3 and e3m0 gradients with and without APS, seeds 1, 2 and 3 (21 runs), as many epochs
# as fit before the deadline. Writes OUT/NAME.csv, OUT/NAME.md (the tables), OUT/NAME.png
# (where matplotlib is) and OUT/NAME.log (everything it printed; NAME-build.log for --build).
#
#   scripts/resnet_experiment.sh [--data DIR] [--out DIR] [--name NAME] [--deadline SECONDS]
#                                [--pythonpath DIR | --build] [-- resnet_fmnist.py ARGS...]
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
start=$SECONDS
data=
out=results
name=resnet
deadline=480
pythonpath=${CPD_PYTHON_DIR:-}
build=0
usage() {
  cat <<EOF
usage: scripts/resnet_experiment.sh [options] [-- resnet_fmnist.py options]

  --data DIR        the four Fashion-MNIST IDX files, .gz, .xz or not (default: .dev/fmnist
                    where it holds them, else Debian's /usr/share/datasets/fashion-mnist)
  --out DIR         where NAME.csv, NAME.md, NAME.png and NAME.log go (default: results)
  --name NAME       the files' name (default: resnet)
  --deadline S      the whole command, build included, ends within S seconds (default 480):
                    the training gets what is left, less 15 s, as --budget-seconds, and
                    --epochs auto fits the epochs to it
  --pythonpath DIR  the directory holding the package cpd/ (default: \$CPD_PYTHON_DIR, else
                    an installed cpd, else build/resnet/site of an earlier --build, else a
                    build tree's build/*/python, the first that imports)
  --build           pip-install cpd from this tree first (no network, no build isolation:
                    scikit-build-core and pybind11 must be there; CUDA module for this GPU)
                    into build/resnet/site, and use it
  -- ARGS           passed on to examples/torch/resnet_fmnist.py (its --help lists them)

The Python: \$CPD_PYTHON, else python3 on PATH when it has torch, else /usr/bin/python3.
Exit status: resnet_fmnist.py's (0 ok, 1 output failure, 2 bad usage, data or package,
3 a run diverged, 4 the deadline stopped it: what ran is written).
EOF
}
bad() { echo "resnet_experiment.sh: $*" >&2; exit 2; }
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --data) [[ $# -ge 2 ]] || bad "--data needs a value"; data=$2; shift 2 ;;
    --out) [[ $# -ge 2 ]] || bad "--out needs a value"; out=$2; shift 2 ;;
    --name) [[ $# -ge 2 ]] || bad "--name needs a value"; name=$2; shift 2 ;;
    --deadline) [[ $# -ge 2 && $2 =~ ^[0-9]+$ ]] || bad "--deadline needs whole seconds"; deadline=$2; shift 2 ;;
    --pythonpath) [[ $# -ge 2 ]] || bad "--pythonpath needs a value"; pythonpath=$2; shift 2 ;;
    --build) build=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) bad "unknown option '$1' (--help lists them)" ;;
  esac
done
[[ -n $name && $name != */* ]] || bad "--name must be a file name without /"
if [[ -z $data ]]; then
  data=/usr/share/datasets/fashion-mnist
  compgen -G ".dev/fmnist/train-images-idx3-ubyte*" >/dev/null && data=.dev/fmnist
fi

python=${CPD_PYTHON:-}
if [[ -z $python ]]; then
  for p in python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null && "$p" -c 'import torch' 2>/dev/null; then python=$p; break; fi
  done
fi
[[ -n $python ]] || bad "no Python with torch (set CPD_PYTHON)"
mkdir -p "$out"
log="$out/$name.log"
: >"$log"
say() { echo "resnet_experiment.sh: $*" | tee -a "$log" >&2; }

imports() { PYTHONPATH="$1${PYTHONPATH:+:$PYTHONPATH}" "$python" -c 'import cpd.torch' 2>/dev/null; }
if (( build )); then
  say "pip-installing cpd into build/resnet/site (log: $out/$name-build.log)"
  cuda=()
  command -v nvidia-smi >/dev/null && cuda=(--config-settings=cmake.define.CMAKE_CUDA_ARCHITECTURES=native)
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$python" -m pip install --no-build-isolation --no-deps --no-input \
    --disable-pip-version-check --upgrade --target build/resnet/site \
    --config-settings=build-dir=build/resnet/pip "${cuda[@]}" . \
    >"$out/$name-build.log" 2>&1 || { tail -n 30 "$out/$name-build.log" >&2; bad "pip install failed"; }
  pythonpath=build/resnet/site
  say "built in $((SECONDS - start)) s"
fi
if [[ -z $pythonpath ]] && ! "$python" -c 'import cpd.torch' 2>/dev/null; then
  for d in build/resnet/site build/*/python; do
    if compgen -G "$d/cpd/_cpd*.so" >/dev/null && imports "$d"; then pythonpath=$d; break; fi
  done
  [[ -n $pythonpath ]] || bad "no package cpd that $python imports: name one with --pythonpath DIR (or \
CPD_PYTHON_DIR), build one with --build, or cmake -DCPD_BUILD_PYTHON=ON (docs/python.md)"
fi
if [[ -n $pythonpath ]]; then
  imports "$pythonpath" || bad "$python cannot import cpd.torch from $pythonpath"
  export PYTHONPATH="$pythonpath${PYTHONPATH:+:$PYTHONPATH}"
fi

plot=(--plot "$out/$name.png")
"$python" -c 'import matplotlib' 2>/dev/null || { plot=(); say "no matplotlib: no plot"; }
budget=$((deadline - (SECONDS - start) - 15))
(( budget > 30 )) || bad "--deadline $deadline leaves ${budget} s for the training"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
  | sed 's/^/resnet_experiment.sh: GPU: /' | tee -a "$log" >&2
say "$("$python" -c 'import sys, torch, cpd
print(f"Python {sys.version.split()[0]}, torch {torch.__version__}, cpd {cpd.__version__} from {cpd.__file__}")')"
say "data $data; $budget s for the training; writing $out/$name.{csv,md,png,log}"
status=0
PYTHONUNBUFFERED=1 "$python" examples/torch/resnet_fmnist.py --data "$data" --epochs auto --budget-seconds "$budget" \
  --out-csv "$out/$name.csv" --out-md "$out/$name.md" "${plot[@]}" "${extra[@]}" 2>&1 | tee -a "$log" \
  || status=${PIPESTATUS[0]}
say "$((SECONDS - start)) s of wall time, exit status $status"
exit "$status"
