//! Links the `cubby` executable position-dependent (no PIE) on Linux unless
//! the build sets `CUBBY_PIE=1`.
//!
//! Why: a PIE binary of cubby's size carries ~42,000 relative relocations,
//! so every start copies ~200 pages of pointer tables before `main` — about
//! 1 ms of each `cubby exec` and `cubby call` (docs/PERFORMANCE.md). The
//! trade-off (the executable's own code sits at a fixed address; libraries,
//! heap, stacks and mappings stay randomized) is in docs/SECURITY.md.

fn main() {
    println!("cargo:rerun-if-env-changed=CUBBY_PIE");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    let pie = std::env::var("CUBBY_PIE").is_ok_and(|v| v == "1");
    if linux && !pie {
        println!("cargo:rustc-link-arg-bin=cubby=-no-pie");
    }
}
