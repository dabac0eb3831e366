//! The pure core of the snowflake extension: the ID layout, the clock and sequence policy, the
//! lease, the fleet check's rules, the read horizon's rules and the text forms. Plain Rust with
//! no pgrx and no PostgreSQL in its dependency tree, so `cargo test -p snowflake-core` exercises
//! all of it, with an injected clock, on any machine with Rust.

pub mod citus;
pub mod codec;
pub mod fleet;
pub mod generator;
pub mod guard;
pub mod horizon;
pub mod layout;
pub mod lease;
pub mod partitions;
pub mod time;
pub mod worker;

#[cfg(test)]
mod stress;
