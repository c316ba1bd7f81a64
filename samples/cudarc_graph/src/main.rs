//! gpuperf sample: kernels launched through the CUDA driver API (`cuLaunchKernel`,
//! via cudarc) and one CUDA graph of three kernels, launched several times.
//!
//! usage: cudarc-graph-sample [STEPS]

use std::process::ExitCode;
use std::sync::Arc;

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaGraph, CudaSlice, CudaStream, DriverError, LaunchConfig,
    PushKernelArg,
};
use cudarc::nvrtc::Ptx;

const N: usize = 1 << 20;

struct Kernels {
    scale: CudaFunction,
    add_one: CudaFunction,
    square: CudaFunction,
}

impl Kernels {
    /// `x = x * a + 1`, as two kernels.
    fn scale_add_one(
        &self,
        stream: &Arc<CudaStream>,
        x: &mut CudaSlice<f32>,
        a: f32,
    ) -> Result<(), DriverError> {
        let n = N as i32;
        // SAFETY: each kernel takes (float*, [float,] int) and stays within n elements.
        unsafe {
            stream
                .launch_builder(&self.scale)
                .arg(&mut *x)
                .arg(&a)
                .arg(&n)
                .launch(cfg())?;
            stream
                .launch_builder(&self.add_one)
                .arg(&mut *x)
                .arg(&n)
                .launch(cfg())?;
        }
        Ok(())
    }

    /// `x = x * x`.
    fn square(&self, stream: &Arc<CudaStream>, x: &mut CudaSlice<f32>) -> Result<(), DriverError> {
        let n = N as i32;
        // SAFETY: as in `scale_add_one`.
        unsafe {
            stream
                .launch_builder(&self.square)
                .arg(&mut *x)
                .arg(&n)
                .launch(cfg())?;
        }
        Ok(())
    }
}

fn cfg() -> LaunchConfig {
    LaunchConfig::for_num_elems(N as u32)
}

#[inline(never)]
fn eager_step(
    stream: &Arc<CudaStream>,
    k: &Kernels,
    x: &mut CudaSlice<f32>,
) -> Result<(), DriverError> {
    k.scale_add_one(stream, x, 0.5)
}

#[inline(never)]
fn capture_graph(
    stream: &Arc<CudaStream>,
    k: &Kernels,
    x: &mut CudaSlice<f32>,
) -> Result<CudaGraph, DriverError> {
    stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
    // Captured, not run, until the graph is launched.
    k.scale_add_one(stream, x, 2.0)?;
    k.square(stream, x)?;
    let graph = stream.end_capture(CUgraphInstantiate_flags(0))?;
    Ok(graph.expect("capture recorded three kernels"))
}

fn run(steps: usize) -> Result<f32, DriverError> {
    let ctx = CudaContext::new(0)?;
    // Not the default (legacy) stream: CUDA refuses to capture it
    // (cuStreamBeginCapture: "Capture may not be initiated if stream is CU_STREAM_LEGACY").
    let stream = ctx.new_stream()?;
    let module = ctx.load_module(Ptx::from_src(include_str!("../kernels.ptx")))?;
    let k = Kernels {
        scale: module.load_function("scale")?,
        add_one: module.load_function("add_one")?,
        square: module.load_function("square")?,
    };
    let mut x = stream.clone_htod(&vec![1.0f32; N])?;
    for _ in 0..steps {
        eager_step(&stream, &k, &mut x)?;
    }
    let graph = capture_graph(&stream, &k, &mut x)?;
    for _ in 0..steps {
        graph.launch()?;
    }
    let host = stream.clone_dtoh(&x)?;
    Ok(host[0])
}

fn main() -> ExitCode {
    let steps = match std::env::args().nth(1).map(|s| s.parse::<usize>()) {
        None => 10,
        Some(Ok(n)) if n > 0 => n,
        _ => {
            eprintln!("usage: cudarc-graph-sample [STEPS]   (STEPS a positive integer)");
            return ExitCode::from(2);
        }
    };
    // cudarc panics when it cannot load libcuda; say it plainly instead.
    // SAFETY: only probes whether the library can be opened.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        eprintln!("cudarc-graph-sample: no CUDA driver (libcuda.so) on this machine");
        return ExitCode::FAILURE;
    }
    match run(steps) {
        Ok(v) => {
            println!(
                "cudarc-graph-sample: {steps} eager steps and {steps} graph launches; x[0] = {v}"
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("cudarc-graph-sample: CUDA error: {e}");
            ExitCode::FAILURE
        }
    }
}
