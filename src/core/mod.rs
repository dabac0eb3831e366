//! The pure core: the ID layout, the clock + sequence policy and time conversions.
//! Plain Rust with no pgrx types, so `cargo test` exercises all of it with an injected clock.

pub mod codec;
pub mod fleet;
pub mod generator;
pub mod horizon;
pub mod layout;
pub mod lease;
pub mod time;

#[cfg(test)]
mod stress;
