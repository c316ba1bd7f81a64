//! Integration tests of the injection library: record decoding on buffers laid
//! out by the real CUPTI headers and walked by the real libcupti, the graceful
//! paths against the real libcupti without a driver, and the recorder on the
//! simulated CUDA runtime and CUPTI (sim/), whose simulated faults play what
//! CUPTI documents can go wrong, and whose CUPTI lock and test hooks play
//! CUPTI's lock under stress and a signal landing while CUPTI holds it.

mod bench_switch;
mod decode;
mod dlopen;
mod host;
mod hostile;
mod lifecycle;
mod python;
mod reset;
mod safety;
mod support;
mod threads;
