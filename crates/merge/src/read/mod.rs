//! Readers: one module per input format, and [`input`], which finds each file's
//! format and opens it.

pub mod cpu;
pub mod driver;
pub mod gputrace;
#[cfg(feature = "render")]
pub mod imported;

#[cfg(feature = "render")]
pub mod cupti_log;
#[cfg(feature = "render")]
pub mod input;
#[cfg(feature = "render")]
pub mod kineto;
#[cfg(feature = "render")]
pub mod nsys;
#[cfg(feature = "render")]
pub mod symbols;
