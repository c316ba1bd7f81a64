//! Integration tests of the injection library: record decoding on buffers laid
//! out by the real CUPTI headers and walked by the real libcupti, the graceful
//! paths against the real libcupti without a driver, and the recorder on the
//! simulated CUDA runtime and CUPTI (sim/), whose simulated faults play what
//! CUPTI documents can go wrong. A few tests still play CUPTI through the MOCK
//! libcupti (tests/data/mock_cupti.c): the exact-id plumbing scene, CUPTI's
//! lock under stress, the 8 KiB sigaltstack, the memory of
//! many graph instantiations between flushes, signal handlers inside launches
//! and SIGINT inside a call.

mod decode;
mod host;
mod hostile;
mod lifecycle;
mod python;
mod safety;
mod support;
