//! unicron-core: the domain model and every decision of unicron.
//!
//! This crate is the `quinn-proto` of unicron: pure step functions and plain
//! data, no I/O, no clock, no unseeded randomness (docs/design.md §4). The record
//! types here mirror the Avro schemas in `schemas/` field for field; the bus
//! crate proves every one round-trips through its schema.

#![forbid(unsafe_code)]

pub mod agent;
pub mod allocation;
pub mod detector;
pub mod executor;
pub mod goodput;
pub mod ingress_budget;
pub mod planner;
pub mod records;
pub mod replay;
pub mod scheduler_view;
pub mod signing;
pub mod status;
pub mod taxonomy;
#[cfg(any(test, feature = "test-util"))]
pub mod testing;

pub use records::*;
pub use taxonomy::{FailureKind, Severity, UnknownSymbol};
