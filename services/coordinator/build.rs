//! The migrations are embedded with `embed_migrations!`, which cargo does not
//! watch: rebuild when they change.

fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
