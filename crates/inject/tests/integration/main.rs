//! Integration tests of the injection library: record decoding on buffers laid
//! out by the real CUPTI headers and walked by the real libcupti, the graceful
//! paths against the real libcupti without a driver, and the recorder's plumbing
//! against a MOCK libcupti.

mod decode;
mod host;
mod hostile;
mod lifecycle;
mod python;
mod safety;
mod support;
