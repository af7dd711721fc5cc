#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
use cubby::sandbox::{ExecSpec, Sandbox};
use cubby::{LinuxOptions, LinuxSandbox, Policy, WorkspacePath};
fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let dir = std::env::temp_dir().join(format!("cubby-scratch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let policy = Policy::builder().build().unwrap();
    let sandbox = LinuxSandbox::open(&dir, LinuxOptions::from_policy(&policy)).unwrap();
    sandbox.start().unwrap();
    let spec = ExecSpec {
        argv: vec!["/bin/true".into()],
        cwd: WorkspacePath::root(),
        env: Vec::new(),
        stdin: false,
        env_remove: Vec::new(),
    };
    let mut times = Vec::new();
    for _ in 0..n {
        let t = std::time::Instant::now();
        let spawned = sandbox.exec(&spec).unwrap();
        drop(spawned.output);
        assert!(spawned.child.wait().unwrap().success());
        if let Some(r) = spawned.on_exit {
            r();
        }
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let mut bare = Vec::new();
    for _ in 0..n {
        let t = std::time::Instant::now();
        std::process::Command::new("/bin/true").status().unwrap();
        bare.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    bare.sort_by(f64::total_cmp);
    println!(
        "sandbox {:.3} bare {:.3} ratio {:.2}",
        times[n / 2],
        bare[n / 2],
        times[n / 2] / bare[n / 2]
    );
    drop(sandbox);
    let _ = std::fs::remove_dir_all(&dir);
}
