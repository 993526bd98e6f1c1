//! Bytes wherever cohort keeps them: a local (or shared) file system, or
//! S3-compatible object storage, both through one API per use so no caller
//! matches on where the bytes are. Locations are parsed by
//! [`cohort_spec::location`]; what a checkpoint is, by
//! [`cohort_spec::checkpoint`].
//!
//! - [`Blob`]: one file or object read by ranges, never whole (the rank's
//!   data shards): [`LocalBlob`], [`S3Blob`].
//! - [`Dir`]: a directory of named entries written whole and atomically
//!   (the rank's checkpoints): staged, then published; listed, read,
//!   fetched and removed.
//! - [`Objects`]: async ranged reads of a directory's files (the
//!   coordinator's checkpoint export).
//! - [`s3`]: the one S3 client builder and the blocking S3 operations,
//!   with the object-storage prefixes a rank's team is confined to.
//! - [`local`]: files opened so that a link swapped in cannot lead a read out.
//! - [`tree`]: a program's checkpoint directory as written: its files
//!   listed and opened, never through a link out of it.

mod blob;
mod dir;
pub mod local;
mod objects;
pub mod s3;
pub mod tree;

pub use blob::{coalesce, Blob};
pub use dir::{Dir, Fetched, Staged};
pub use local::LocalBlob;
pub use objects::Objects;
pub use s3::S3Blob;
