//! Builds the c10d shim against the headers of the libtorch that torch-sys
//! found, and gives the binary an rpath to that libtorch so it runs without
//! LD_LIBRARY_PATH.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=shim/c10d_shim.cpp");
    println!("cargo:rerun-if-env-changed=LIBTORCH_CXX11_ABI");
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
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .define("_GLIBCXX_USE_CXX11_ABI", abi.as_str())
        .define("USE_C10D_GLOO", None)
        .flag_if_supported("-Wno-unused-parameter")
        .flag_if_supported("-Wno-deprecated-declarations")
        .warnings(false);
    if env::var_os("CARGO_FEATURE_NCCL").is_some() {
        build.define("USE_C10D_NCCL", None);
        for dir in env::var("COHORT_CUDA_INCLUDE")
            .unwrap_or_default()
            .split(':')
        {
            if !dir.is_empty() {
                build.include(dir);
            }
        }
    }
    build.compile("cohort_c10d_shim");

    println!("cargo:rustc-link-search=native={}", lib.display());
    println!("cargo:rustc-link-lib=dylib=torch_cpu");
    println!("cargo:rustc-link-lib=dylib=c10");
    // Keep libtorch (and through it libtorch_cuda) even though no symbol is
    // referenced directly, or CUDA looks absent on a GPU machine.
    println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
    println!("cargo:rustc-link-arg=-ltorch");
    if env::var_os("CARGO_FEATURE_NCCL").is_some() {
        println!("cargo:rustc-link-arg=-ltorch_cuda");
    }
    println!("cargo:rustc-link-arg=-Wl,--as-needed");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
}
