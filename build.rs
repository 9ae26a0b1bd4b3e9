//! Rebuild when a migration is added or changed: `sqlx::migrate!` embeds `migrations/` at compile
//! time, and cargo does not otherwise notice a new file there (as the sqlx documentation says).

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
