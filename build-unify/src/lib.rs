//! No code. Its dependencies enable, for every binary's build, the
//! features cohort-rank's dependencies (tch, parquet, zip) turn on in
//! crates the other binaries share, so that building the coordinator, the
//! agent and the CLI first (as `scripts/demo.sh` does while PyTorch
//! downloads) leaves nothing to rebuild when cohort-rank joins them.
//! `scripts/check-unify.sh` fails when the list falls behind.
