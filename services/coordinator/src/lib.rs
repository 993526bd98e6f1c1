//! `cohort-coordinator`: the control plane's server.
//!
//! - [`model`]: domain types (job and rank states, GPU requests, trainings).
//! - [`persistence`]: the database (SQLite or PostgreSQL through diesel).

pub mod model;
pub mod persistence;
