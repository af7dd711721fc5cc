//! The pids cgroup (v1) that bounds a sandbox's processes where the
//! kernel has no `pid_max` per pid namespace: made per sandbox when the
//! machine lets cubby, removed with it, and swept when a cubby that made
//! one died.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Where a pids cgroup (v1) can be made.
const PIDS_CGROUP_V1: &str = "/sys/fs/cgroup/pids";

/// Numbers the cgroups of this process's sandboxes.
static SANDBOX_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Removes the pids cgroups of cubby processes that no longer exist (a
/// cgroup is removed only once empty, so a live sandbox's never is).
fn sweep_cgroups() {
    let Ok(entries) = std::fs::read_dir(PIDS_CGROUP_V1) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("cubby-"))
            .and_then(|n| n.split('-').next())
        else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

/// A pids cgroup (v1) this process may create children in.
pub(super) fn pids_cgroup_parent() -> Option<PathBuf> {
    let dir = Path::new(PIDS_CGROUP_V1);
    let probe = dir.join(format!("cubby-probe-{}", std::process::id()));
    match std::fs::create_dir(&probe) {
        Ok(()) => {
            let usable = probe.join("pids.max").exists();
            let _ = std::fs::remove_dir(&probe);
            usable.then(|| dir.to_path_buf())
        }
        Err(_) => None,
    }
}

/// A pids cgroup of at most `processes` processes for a new sandbox, when
/// the machine lets cubby make one.
pub(super) fn make_cgroup(processes: u64) -> Option<PathBuf> {
    if processes == 0 {
        return None;
    }
    sweep_cgroups();
    let dir = Path::new(PIDS_CGROUP_V1).join(format!(
        "cubby-{}-{}",
        std::process::id(),
        SANDBOX_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir(&dir).ok()?;
    if std::fs::write(dir.join("pids.max"), processes.to_string()).is_err() {
        let _ = std::fs::remove_dir(&dir);
        return None;
    }
    Some(dir)
}
