//! Profiler tests against the real kernel, libbpf and blazesym. They need root
//! (CI runs as root) and skip themselves otherwise.

mod bpf_object;
mod elf;
mod kernel_vm;
mod probes;
mod support;
mod unwind;
