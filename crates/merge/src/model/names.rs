//! CUDA API names: CUPTI's version suffixes stripped, and which calls launch,
//! copy or set memory.

/// Strips CUPTI's version suffix: `cudaLaunchKernel_v7000` → `cudaLaunchKernel`.
pub fn api_base_name(name: &str) -> &str {
    match name.rfind("_v") {
        Some(i)
            if i > 0 && name[i + 2..].bytes().all(|b| b.is_ascii_digit()) && name.len() > i + 2 =>
        {
            &name[..i]
        }
        _ => name,
    }
}

/// The function an API name stands for, without CUPTI's version suffix, the
/// per-thread-stream `_ptsz` variant mark, or the leading underscores of CUDA 13's
/// `<<<>>>` stubs: `__cudaLaunchKernel_ptsz_v13000` → `cudaLaunchKernel`.
pub fn api_stem(name: &str) -> &str {
    let name = api_base_name(name);
    let name = name.strip_suffix("_ptsz").unwrap_or(name);
    name.trim_start_matches('_')
}

/// Whether an API name is a kernel or graph launch, the calls the CPU profiler probes.
/// Host-function launches start no GPU work and are not.
pub fn is_launch_api(name: &str) -> bool {
    let name = api_stem(name);
    if name.contains("HostFunc") {
        return false;
    }
    name.starts_with("cudaLaunch")
        || name.starts_with("cuLaunch")
        || matches!(name, "cudaGraphLaunch" | "cuGraphLaunch")
}

/// Whether an API name is a memory copy (`cudaMemcpy*`, `cuMemcpy*`).
pub fn is_copy_api(name: &str) -> bool {
    let name = api_stem(name);
    name.starts_with("cudaMemcpy") || name.starts_with("cuMemcpy")
}

/// Whether an API name is a memset (`cudaMemset*`, `cuMemset*`).
pub fn is_memset_api(name: &str) -> bool {
    let name = api_stem(name);
    name.starts_with("cudaMemset") || name.starts_with("cuMemset")
}
