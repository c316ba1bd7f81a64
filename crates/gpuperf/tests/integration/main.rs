//! End-to-end tests of the `gpuperf` binary, in one test binary: each module
//! was a test binary of its own, and its name now starts its tests' names
//! (`cargo test -p gpuperf --test integration sim::`). The kernel VM tests
//! (`tests/kernel_vm*.rs`) stay binaries of their own: each runs its own
//! binary again inside a guest.
#![allow(non_snake_case)]

#[path = "../common/mod.rs"]
mod common;

mod capture;
mod cli;
mod diff;
mod monitor;
mod nvtx;
mod outputs;
mod pc_sampling;
mod ranks;
mod record;
mod record_outputs;
mod recordings;
mod sim;
mod sim_setup;
mod torch;
mod view;
