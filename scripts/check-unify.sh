#!/usr/bin/env bash
# Checks that building the coordinator, the agent and the CLI resolves every
# crate they share with cohort-rank to the same features as building all
# four (what build-unify/ is for): scripts/demo.sh builds the three while
# PyTorch downloads, then all four, and a difference here would compile
# those crates, and all above them, twice. No build: `cargo tree` only.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
features() {
  cargo tree --locked -e normal,build --prefix none -f '{p} [{f}]' "$@" |
    sed 's/ (\*)$//; s/ (proc-macro)//' | sort -u
}
three=$(features -p cohort-coordinator -p cohort-agent -p cohort-cli)
four=$(features -p cohort-coordinator -p cohort-agent -p cohort-cli -p cohort-rank)
# A crate of the three's build whose feature set the four's build lacks.
differ=$(comm -23 <(echo "$three") <(echo "$four"))
if [ -n "$differ" ]; then
  echo "check-unify: these crates get other features once cohort-rank is built with them:" >&2
  echo "$differ" | sed 's/^/  /' >&2
  echo "compare with: $(basename "$0") ... and add the missing features to build-unify/Cargo.toml" >&2
  exit 1
fi
echo "check-unify: the three binaries' dependencies build as in the four's build"
