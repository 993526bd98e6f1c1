//! The migrations are embedded with `embed_migrations!`, and the web
//! console's built files with rust-embed; cargo watches neither: rebuild
//! when they change. Before the console is built, its source directory is
//! watched instead, so the build that follows `npm run build` embeds it.

use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
    if Path::new("../../console/dist").is_dir() {
        println!("cargo:rerun-if-changed=../../console/dist");
    } else {
        println!("cargo:rerun-if-changed=../../console");
    }
}
