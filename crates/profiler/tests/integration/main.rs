//! Profiler tests against the real kernel, libbpf and blazesym. They need root
//! (CI runs as root) and skip themselves otherwise.

mod probes;
mod support;
