#!/usr/bin/env bash
# The test command: installs what is missing, then runs every test of the
# workspace (unit, real-process integration, SQLite and PostgreSQL), plus the
# formatting and lint gates.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
source scripts/env.sh
# Incremental state only helps repeated local builds; on a fresh machine it
# doubles the target directory's size.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# The fuzz properties (tests/fuzz*.rs, */fuzz.rs): a bounded run of each;
# docs/benchmarks.md gives a longer one.
export PROPTEST_CASES="${PROPTEST_CASES:-1000}"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# The integration tests run the real binaries: build them all first.
cargo build --workspace --locked --bins
# deploy/: Kubernetes manifests, Dockerfiles and systemd units, offline.
bash scripts/check-deploy.sh
# The demo's two-step build shares its artifacts (build-unify/).
bash scripts/check-unify.sh
cargo test --workspace --locked
# The programs' Python helper; the Python client against a real
# coordinator and agent (the binaries built above) and PostgreSQL.
"$COHORT_VENV/bin/python" -m pytest -q sdk/python/tests
"$COHORT_VENV/bin/python" -m pytest -q sdk/python-client/tests
# The web console: component tests, then end-to-end tests in Debian's
# Chromium against a real coordinator and agent (the binaries built above).
npm --prefix console test --silent
npm --prefix console run --silent e2e
