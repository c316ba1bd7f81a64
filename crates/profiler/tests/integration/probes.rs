use gpuperf_profiler::{Options, ProbeSpec};

use crate::support::{app, privileged, profile};

fn compat(exe: &std::path::Path) -> Options {
    Options {
        uprobes: vec![ProbeSpec {
            path: exe.to_owned(),
            symbol: "cudaLaunchKernel".into(),
        }],
        ..Options::default()
    }
}

#[test]
fn compat_mode_on_a_static_cudart_gives_one_full_stack_per_call() {
    if !privileged() {
        return;
    }
    let exe = app("app-fp", &["-fno-omit-frame-pointer"]);
    let run = profile(compat(&exe), &exe, &["200", "0"], &[]);
    eprintln!("{}", &run.text[..run.text.len().min(600)]);
    eprintln!("{:?}", run.summary);
    assert_eq!(run.trace.launches.len(), 200);
}
