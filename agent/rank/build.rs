//! Builds the C++ shims (c10d collectives, the fused Adam) against the
//! headers of the libtorch that torch-sys
//! found, and gives the binary an rpath to that libtorch so it runs without
//! LD_LIBRARY_PATH.
//!
//! ProcessGroupNCCL is built whenever that libtorch has CUDA
//! (`libtorch_cuda.so`) and the CUDA and NCCL headers are there: from
//! `COHORT_CUDA_INCLUDE` (':'-separated), else from the NVIDIA wheels beside
//! torch in its site-packages (`nvidia/cu13/include`, its `cccl`, and
//! `nvidia/nccl/include`: scripts/setup.sh installs the header wheels).
//! The `nccl` feature makes NCCL required instead of optional.

use std::env;
use std::path::{Path, PathBuf};

/// The include directories for the NCCL path, if every one is there.
fn cuda_includes(torch_root: &Path) -> Option<Vec<PathBuf>> {
    if let Ok(dirs) = env::var("COHORT_CUDA_INCLUDE") {
        let dirs: Vec<PathBuf> = dirs
            .split(':')
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .collect();
        return (!dirs.is_empty()).then_some(dirs);
    }
    let nvidia = torch_root.parent()?.join("nvidia");
    let cu = nvidia.join("cu13/include");
    let dirs = vec![cu.join("cccl"), cu.clone(), nvidia.join("nccl/include")];
    let complete = cu.join("cuda_runtime_api.h").is_file()
        && cu.join("crt/host_config.h").is_file()
        && cu.join("cccl/cuda/std/version").is_file()
        && nvidia.join("nccl/include/nccl.h").is_file();
    complete.then_some(dirs)
}

/// The torch version and the CUDA version that libtorch was built for, from
/// the wheel's `version.py` (`cohort-rank doctor` reports them; empty when
/// libtorch is not from a wheel or has no CUDA).
fn torch_versions(torch_root: &Path) {
    let file = torch_root.join("version.py");
    println!("cargo:rerun-if-changed={}", file.display());
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    let field = |name: &str| -> String {
        text.lines()
            .filter_map(|line| line.split_once('='))
            .filter(|(key, _)| key.split(':').next().unwrap_or("").trim() == name)
            .map(|(_, value)| {
                value
                    .trim()
                    .trim_matches(|c| c == '\'' || c == '"')
                    .to_string()
            })
            .find(|value| value != "None")
            .unwrap_or_default()
    };
    println!(
        "cargo:rustc-env=COHORT_TORCH_VERSION={}",
        field("__version__")
    );
    println!("cargo:rustc-env=COHORT_TORCH_CUDA={}", field("cuda"));
}

fn main() {
    println!("cargo:rerun-if-changed=shim/c10d_shim.cpp");
    println!("cargo:rerun-if-changed=shim/optim_shim.cpp");
    println!("cargo:rerun-if-env-changed=LIBTORCH_CXX11_ABI");
    println!("cargo:rerun-if-env-changed=COHORT_CUDA_INCLUDE");
    println!("cargo::rustc-check-cfg=cfg(cohort_nccl)");
    let lib = PathBuf::from(
        env::var("DEP_TCH_LIBTORCH_LIB").expect("torch-sys exports DEP_TCH_LIBTORCH_LIB"),
    );
    let root = lib.parent().expect("libtorch lib dir has a parent");
    let include = root.join("include");
    // PyTorch wheels from 2.6 on are built with the C++11 ABI.
    let abi = env::var("LIBTORCH_CXX11_ABI").unwrap_or_else(|_| "1".to_string());

    let mut build = cc::Build::new();
    build
        .cpp(true)
        .std("c++17")
        .file("shim/c10d_shim.cpp")
        .file("shim/optim_shim.cpp")
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .define("_GLIBCXX_USE_CXX11_ABI", abi.as_str())
        .define("USE_C10D_GLOO", None)
        .flag_if_supported("-Wno-unused-parameter")
        .flag_if_supported("-Wno-deprecated-declarations")
        .warnings(false);
    let required = env::var_os("CARGO_FEATURE_NCCL").is_some();
    let has_cuda = lib.join("libtorch_cuda.so").is_file();
    let includes = if has_cuda { cuda_includes(root) } else { None };
    let nccl = match includes {
        Some(dirs) => {
            build.define("USE_C10D_NCCL", None);
            for dir in &dirs {
                println!("cargo:rerun-if-changed={}", dir.display());
                build.include(dir);
            }
            true
        }
        None if required => panic!(
            "the `nccl` feature needs a libtorch with CUDA and the CUDA and NCCL headers (COHORT_CUDA_INCLUDE, or scripts/setup.sh's wheels)"
        ),
        None => {
            println!(
                "cargo:warning=cohort-rank is built without ProcessGroupNCCL ({}): CUDA ranks will all-reduce through gloo",
                if has_cuda { "no CUDA/NCCL headers found" } else { "this libtorch has no CUDA" }
            );
            false
        }
    };
    build.compile("cohort_c10d_shim");
    torch_versions(root);

    println!("cargo:rustc-link-search=native={}", lib.display());
    println!("cargo:rustc-link-lib=dylib=torch_cpu");
    println!("cargo:rustc-link-lib=dylib=c10");
    // Keep libtorch (and through it libtorch_cuda) even though no symbol is
    // referenced directly, or CUDA looks absent on a GPU machine.
    println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
    println!("cargo:rustc-link-arg=-ltorch");
    if nccl {
        println!("cargo:rustc-link-arg=-ltorch_cuda");
        // The CUDA caching allocator's statistics (rank_stats.memory_bytes).
        println!("cargo:rustc-link-arg=-lc10_cuda");
        println!("cargo:rustc-cfg=cohort_nccl");
    }
    println!("cargo:rustc-link-arg=-Wl,--as-needed");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
}
