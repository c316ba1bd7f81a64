//! Backward kernels charged to their forward op: PyTorch profiler traces link
//! each backward op to the forward op that made it, by `fwdbwd` flows or by
//! sequence number.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::Path;

use gpuperf_merge::model::StringTable;
use gpuperf_merge::read::kineto;
use serde_json::Value;

use crate::data;
use crate::imported::{V100, real, run};

fn folded_lines(folded: &str) -> BTreeSet<&str> {
    folded.lines().collect()
}

#[test]
fn kineto_fwdbwd_flows__backward_kernel_under_its_forward_op_and_unlinked_counted() {
    let out = run(&[data("kineto/backward_flows.pt.trace.json")]);
    // The flow names `aten::addmm`; the later `aten::relu` with the same sequence
    // number would be the match by number alone.
    let want: BTreeSet<&str> = [
        "train.py(10): step;model.py(20): forward;aten::linear;aten::addmm;cudaLaunchKernel;[GPU_Kernel]fwd_gemm 10",
        "train.py(10): step;model.py(20): forward;aten::linear;aten::addmm;[backward];autograd::engine::evaluate_function: AddmmBackward0;AddmmBackward0;aten::mm;cudaLaunchKernel;[GPU_Kernel]bwd_gemm 20",
        "autograd::engine::evaluate_function: AccumulateGrad;AccumulateGrad;aten::add_;cudaLaunchKernel;[GPU_Kernel]accumulate 3",
    ]
    .into();
    assert_eq!(folded_lines(&out.folded), want);
    assert!(out.summary.to_string().contains(
        "2 kernels launched under a backward op: 1 charged to their forward op's stack under `[backward]`, 1 left on the backward thread's stack (no forward op found)"
    ), "{}", out.summary);
}

#[test]
fn kineto2021_sequence_numbers__backward_kernel_under_the_nearest_preceding_forward_op() {
    let out = run(&[data("kineto/backward_seq.pt.trace.json")]);
    // Three nested forward ops share number 3: the innermost (latest) made the
    // node; the one after the backward op is a later step's.
    let want: BTreeSet<&str> = [
        "train.py(10): step;model.py(30): loss;aten::nll_loss_nd;aten::nll_loss;aten::nll_loss_forward;cudaLaunchKernel;[GPU_Kernel]fwd_loss 4",
        "train.py(10): step;model.py(30): loss;aten::nll_loss_nd;aten::nll_loss;aten::nll_loss_forward;[backward];NllLossBackward;aten::nll_loss_backward;cudaLaunchKernel;[GPU_Kernel]bwd_loss 6",
        "AddBackward0;cudaLaunchKernel;[GPU_Kernel]add_bwd 2",
    ]
    .into();
    assert_eq!(folded_lines(&out.folded), want);
    assert!(out.summary.to_string().contains(
        "2 kernels launched under a backward op: 1 charged to their forward op's stack under `[backward]`, 1 left on the backward thread's stack (no forward op found)"
    ), "{}", out.summary);
}

#[test]
fn kineto_link_backward_off__backward_stacks_stay_native_and_no_note() {
    for (file, corr, native) in [
        (
            "kineto/backward_flows.pt.trace.json",
            2,
            "autograd::engine::evaluate_function: AddmmBackward0;AddmmBackward0;aten::mm;cudaLaunchKernel",
        ),
        (
            "kineto/backward_seq.pt.trace.json",
            2,
            "NllLossBackward;aten::nll_loss_backward;cudaLaunchKernel",
        ),
    ] {
        let mut options = kineto::Options::default();
        options.link_backward = false;
        let mut strings = StringTable::new();
        let imp = kineto::read_with(
            fs::File::open(data(file)).unwrap(),
            Path::new(file),
            &mut strings,
            &options,
        )
        .unwrap();
        let stacks = imp.launch_stacks.as_ref().unwrap();
        let l = stacks
            .launches
            .iter()
            .find(|l| l.correlation_id.is_some_and(|c| c.get() == corr))
            .unwrap();
        assert_eq!(stacks.stacks.text(l.stack), native, "{file}");
        assert!(
            !imp.notes.iter().any(|n| n.contains("backward")),
            "{:?}",
            imp.notes
        );
    }
}

/// µs (a JSON number) → ns.
fn ns(v: &Value) -> u64 {
    (v.as_f64().unwrap() * 1000.0).round() as u64
}

#[test]
fn v100_kineto2021__backward_kernels_charged_to_a_forward_python_stack_and_counted() {
    let path = real(V100);
    let bytes = fs::read(&path).unwrap();
    let trace: Value = serde_json::from_reader(flate2::read::GzDecoder::new(&bytes[..])).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let fwd_thread = |e: &Value| e["args"]["Fwd thread id"].as_i64();
    let seq = |e: &Value| e["args"]["Sequence number"].as_i64();
    let ops = |fwd: bool| -> Vec<&Value> {
        events
            .iter()
            .filter(|e| e["cat"] == "Operator")
            .filter(|e| fwd_thread(e).is_some_and(|f| (f == 0) == fwd))
            .collect()
    };
    let (forward_ops, backward_ops) = (ops(true), ops(false));
    let mut kernels: HashMap<u64, u64> = HashMap::new();
    for e in events.iter().filter(|e| e["cat"] == "Kernel") {
        *kernels
            .entry(e["args"]["correlation"].as_u64().unwrap())
            .or_default() += 1;
    }
    let out = run(&[path]);
    let (mut linked, mut unlinked) = (0u64, 0u64);
    for call in events.iter().filter(|e| e["cat"] == "Runtime") {
        let corr = call["args"]["correlation"].as_u64().unwrap();
        let Some(&n) = kernels.get(&corr) else {
            continue;
        };
        let t = ns(&call["ts"]);
        // The outermost backward op enclosing the call on its thread.
        let Some(bwd) = backward_ops
            .iter()
            .filter(|o| o["tid"] == call["tid"])
            .filter(|o| ns(&o["ts"]) <= t && t <= ns(&o["ts"]) + ns(&o["dur"]))
            .min_by_key(|o| (ns(&o["ts"]), std::cmp::Reverse(ns(&o["dur"]))))
        else {
            assert!(!out.stacks[&(corr as u32)].contains("[backward]"));
            continue;
        };
        // Its forward op: same number, forward thread, latest start before it.
        let fwd = forward_ops
            .iter()
            .filter(|o| o["tid"] != bwd["tid"])
            .filter(|o| seq(o) == seq(bwd) && ns(&o["ts"]) <= ns(&bwd["ts"]))
            .max_by_key(|o| ns(&o["ts"]));
        let stack = &out.stacks[&(corr as u32)];
        match fwd {
            Some(f) => {
                linked += n;
                let (forward, own) = stack.split_once(";[backward];").unwrap();
                let frames: Vec<&str> = forward.split(';').collect();
                assert_eq!(*frames.last().unwrap(), f["name"].as_str().unwrap());
                assert!(frames[0].contains(".py("), "{stack}");
                assert!(own.starts_with(bwd["name"].as_str().unwrap()), "{stack}");
            }
            None => {
                unlinked += n;
                assert!(!stack.contains("[backward]"), "{stack}");
            }
        }
    }
    assert!(linked > 0);
    let note = format!(
        "{} kernels launched under a backward op: {linked} charged to their forward op's stack under `[backward]`, {unlinked} left on the backward thread's stack (no forward op found)",
        linked + unlinked
    );
    assert!(
        out.summary.to_string().contains(&note),
        "{note}\n{}",
        out.summary
    );
}
