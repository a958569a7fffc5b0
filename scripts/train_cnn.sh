#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The CNN experiment of docs/results.md ("A CNN in PyTorch (cpd.torch)"): a LeNet-5-like
# CNN on Debian's Fashion-MNIST, 8 emulated data-parallel workers (or 4 gloo processes
# with torch DDP), fp32 against e5m2, e4m3 and e3m0 gradients with and without APS, the
# same initial weights and data order in every run of a seed. Runs
# examples/torch/train_cnn.py with Debian's /usr/bin/python3 (python3-torch) and the
# Python package cpd of a build tree, and writes DIR/NAME.csv, DIR/NAME.png and
# DIR/NAME.md (the tables).
#
#   scripts/train_cnn.sh [--out DIR] [--name NAME] [--seeds 1,2,3] [--epochs N]
#                        [--mode emulated|ddp] [--threads N] [--pythonpath DIR] [-- ARGS...]
#
# ARGS after -- go to train_cnn.py (its --help lists them: --formats, --aps, --exchanges, --lr, ...).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=results
name=cnn
seeds=1
epochs=5
mode=emulated
threads=1
pythonpath=${CPD_PYTHONPATH:-}
usage() {
  cat <<EOF
usage: scripts/train_cnn.sh [options] [-- train_cnn.py options]

The default experiment (about 8 minutes on an idle 2-core machine): LeNet-5 on
Fashion-MNIST, 8 emulated workers, fp32, e5m2, e4m3, e3m0 x APS off/on, 5 epochs.

  --out DIR          where NAME.csv, NAME.png and NAME.md go (default: results)
  --name NAME        the files' name (default: cnn)
  --seeds LIST       seeds, comma-separated (default: 1)
  --epochs N         epochs per run (default: 5)
  --mode MODE        emulated (one process) or ddp (4 gloo processes) (default: emulated)
  --threads N        torch threads per process (default: 1)
  --pythonpath DIR   the directory holding the package cpd (default: \$CPD_PYTHONPATH,
                     else build/ci/python, else the first build/*/python that has it)
  -h, --help         this text
  -- ARGS            passed on to examples/torch/train_cnn.py (see its --help)

Exit status: train_cnn.py's (0 ok, 1 output or worker failure, 2 bad usage or
missing data/package, 3 a run diverged).
EOF
}
bad() { echo "train_cnn.sh: $*" >&2; echo "(scripts/train_cnn.sh --help lists the options)" >&2; exit 2; }
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) [[ $# -ge 2 ]] || bad "--out needs a value"; out=$2; shift 2 ;;
    --name) [[ $# -ge 2 ]] || bad "--name needs a value"; name=$2; shift 2 ;;
    --seeds) [[ $# -ge 2 ]] || bad "--seeds needs a value"; seeds=$2; shift 2 ;;
    --epochs) [[ $# -ge 2 ]] || bad "--epochs needs a value"; epochs=$2; shift 2 ;;
    --mode) [[ $# -ge 2 ]] || bad "--mode needs a value"; mode=$2; shift 2 ;;
    --threads) [[ $# -ge 2 ]] || bad "--threads needs a value"; threads=$2; shift 2 ;;
    --pythonpath) [[ $# -ge 2 ]] || bad "--pythonpath needs a value"; pythonpath=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) bad "unknown option '$1'" ;;
  esac
done
[[ -n $name && $name != */* ]] || bad "--name must be a file name without /"

python=/usr/bin/python3
[[ -x $python ]] || { echo "train_cnn.sh: needs Debian's /usr/bin/python3 with python3-torch (apt-get install python3-torch python3-matplotlib)" >&2; exit 2; }
has_cpd() { compgen -G "$1/cpd/_cpd*.so" >/dev/null; }
if [[ -z $pythonpath ]]; then
  for d in build/ci/python build/*/python; do
    if has_cpd "$d"; then pythonpath=$d; break; fi
  done
fi
if [[ -z $pythonpath ]] || ! has_cpd "$pythonpath"; then
  echo "train_cnn.sh: no built Python package cpd${pythonpath:+ in $pythonpath}; build it with" >&2
  echo "  cmake --preset ci -DCPD_BUILD_PYTHON=ON && cmake --build build/ci --target cpd_python_native" >&2
  echo "(needs pybind11-dev and python3-dev) or name one with --pythonpath DIR" >&2
  exit 2
fi
mkdir -p "$out"
echo "train_cnn.sh: cpd from $pythonpath; writing $out/$name.{csv,png,md}" >&2
start=$(date +%s)
status=0
PYTHONPATH=$pythonpath${PYTHONPATH:+:$PYTHONPATH} "$python" examples/torch/train_cnn.py \
  --mode "$mode" --seeds "$seeds" --epochs "$epochs" --threads "$threads" \
  --out-csv "$out/$name.csv" --plot "$out/$name.png" "${extra[@]}" >"$out/$name.md" || status=$?
cat "$out/$name.md"
echo "train_cnn.sh: $(( $(date +%s) - start )) s of wall time, exit status $status" >&2
exit $status
