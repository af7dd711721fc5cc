//! What a sandbox's open allocates in the server, counted. The holders of
//! the `linux` provider are forks of the server: every page of the server's
//! heap that an open writes after a holder was forked becomes that holder's
//! own copy, so short-lived allocations on the open path cost memory in
//! every idle sandbox (docs/PERFORMANCE.md, issue 15's idle sandboxes).
//! Alone in its test binary: it counts with its own global allocator.

#![allow(clippy::unwrap_used, clippy::expect_used)]
// The counting allocator is the one unsafe item here.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    /// Allocations (and reallocations) made by this thread.
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

/// The system allocator, counting per thread.
struct Counting;

// SAFETY: every call is passed to `System` unchanged; the count is a
// const-initialised thread-local `Cell` (no allocation, no destructor).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with `layout` (the caller's promise).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: as `GlobalAlloc::realloc` requires of the caller.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// Allocations a second open of a `linux` sandbox may make: 177 on the
/// test VM (9 homes in `/etc/passwd`), 633 before the credential-store list
/// was shared and the homes and the placeholder sweep made frugal.
const MAX_SECOND_OPEN_ALLOCATIONS: u64 = 256;

fn allocations_in<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let before = ALLOCATIONS.with(Cell::get);
    let out = f();
    (out, ALLOCATIONS.with(Cell::get) - before)
}

#[test]
fn the_policy_digest_of_an_open_allocates_nothing() {
    let network = cubby::config::NetworkConfig {
        allowed_domains: vec!["example.com".into(), "crates.io".into()],
        ..cubby::config::NetworkConfig::default()
    };
    let policy = cubby::Policy::builder()
        .deny_read(["secrets/", "notes/private.txt"])
        .protect("keep.txt")
        .writable_roots(["/srv/cache"])
        .network(network)
        .build()
        .unwrap();
    let first = policy.sandbox_digest();
    let (again, count) = allocations_in(|| policy.sandbox_digest());
    assert_eq!(again, first);
    assert_eq!(
        count, 0,
        "the digest made {count} allocations (each open of a sandbox computes it)"
    );
}

#[cfg(target_os = "linux")]
#[test]
fn a_second_open_of_a_linux_sandbox_shares_the_credential_store_list() {
    let dir = tempfile::tempdir().unwrap();
    let policy = cubby::Policy::builder().build().unwrap();
    let host = cubby::HostEnv::capture();
    let first = cubby::LinuxSandbox::open(dir.path(), &policy, &host).unwrap();
    let (second, count) =
        allocations_in(|| cubby::LinuxSandbox::open(dir.path(), &policy, &host).unwrap());
    // The list of credential stores watched in every home (about 30 a
    // home, each a path and its links to the others: ~290 allocations on
    // the test VM) is built by the first open and shared after it; the
    // homes are looked up with names borrowed from `/etc/passwd`; the
    // placeholder sweep makes no error for each missing protected path.
    // What is left is the open's own work (the options, git's surface, the
    // paths swept).
    assert!(
        count < MAX_SECOND_OPEN_ALLOCATIONS,
        "a second open made {count} allocations"
    );
    drop((first, second));
}
