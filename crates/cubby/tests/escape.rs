//! The escape suite: commands on the `linux` provider try to get out, and
//! each attempt is proved contained from the host's side.
//!
//! The suite runs twice: as the user running the tests (root here, and in
//! CI) and as an unprivileged user that the test creates (`cubby-escape`):
//! user namespaces, Landlock, capabilities and `RLIMIT_NPROC` behave
//! differently for the two. The unprivileged run re-executes this test
//! binary (copied where that user can read it) under that user's uid.
//!
//! Every attack is a shell command run through the `run` tool. An attack
//! is *contained* when the host afterwards shows no trace of it (no file
//! outside the root, protected paths unchanged, no connection accepted, no
//! process left, the host's process alive), whatever the command printed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::processes_with;
use std::io::Read;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cubby::{HostEnv, Limits, LinuxSandbox, Policy, PolicyBuilder, ToolOutput, Toolset};
use serde_json::json;

/// The unprivileged user the suite creates and runs as.
const ESCAPE_USER: &str = "cubby-escape";
/// Set in the child process that runs the suite as that user.
const CHILD_ENV: &str = "CUBBY_ESCAPE_CHILD";
/// Limits small enough to hit quickly.
const TEST_PROCESSES: u64 = 400;
const TEST_FILE_SIZE_MB: u64 = 8;
const TEST_ADDRESS_SPACE_MB: u64 = 1024;
/// `/tmp` and `/dev/shm` of the labs that fill them.
const TEST_TMP_MB: u64 = 16;
/// The minimum number of attacks the suite must hold.
const MIN_ATTACKS: usize = 30;
/// Where labs are made: a directory commands can see (unlike `/tmp`, which
/// is private inside the sandbox), so that attacks on the outside directory
/// meet only the sandbox's own defences.
const LAB_BASE: &str = "/var/tmp";
/// A `deny_read` path below the root's top level.
const NESTED_SECRET_DIR: &str = "nested/deep/secrets";

/// A workspace and a sibling directory outside it, under one parent.
struct Lab {
    base: tempfile::TempDir,
    ws: PathBuf,
    outside: PathBuf,
    tools: Toolset,
}

/// A lab's directories: the workspace and a sibling outside it, under one
/// temporary parent beneath [`LAB_BASE`].
fn lab_dirs() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let base = tempfile::Builder::new()
        .prefix("cubby-escape-")
        .tempdir_in(LAB_BASE)
        .unwrap();
    let ws = base.path().join("ws");
    let outside = base.path().join("ws-outside");
    std::fs::create_dir(&ws).unwrap();
    std::fs::create_dir(&outside).unwrap();
    (base, ws, outside)
}

/// The lab's toolset: a `linux` sandbox on `ws` opened from `policy`, and
/// the toolset under the same policy.
fn open_lab(base: tempfile::TempDir, ws: PathBuf, outside: PathBuf, policy: Policy) -> Lab {
    let host = HostEnv::capture();
    let sandbox = LinuxSandbox::open(&ws, &policy, &host).unwrap();
    let tools = Toolset::builder(Arc::new(sandbox))
        .policy(policy)
        .host_env(host)
        .track_changes(false)
        .build()
        .unwrap();
    Lab {
        base,
        ws,
        outside,
        tools,
    }
}

fn lab_with(configure: impl FnOnce(&mut PolicyBuilder, &mut Limits, &Path)) -> Lab {
    let (base, ws, outside) = lab_dirs();
    std::fs::write(outside.join("target.txt"), "original\n").unwrap();
    let nested = format!("{NESTED_SECRET_DIR}/");
    let mut policy = Policy::builder();
    policy.deny_read(["secrets/", nested.as_str(), ".env"]);
    let mut limits = Limits::default();
    limits.sandbox.processes = TEST_PROCESSES;
    limits.sandbox.file_size_mb = TEST_FILE_SIZE_MB;
    limits.sandbox.address_space_mb = TEST_ADDRESS_SPACE_MB;
    configure(&mut policy, &mut limits, &ws);
    let policy = policy.limits(limits).build().unwrap();
    open_lab(base, ws, outside, policy)
}

fn lab() -> Lab {
    lab_with(|_, _, _| {})
}

impl Drop for Lab {
    /// Lets the lab's directory be removed: copies of the masks of
    /// `deny_read` paths (`cp -r secrets s2`) are mode 000, which only root
    /// can list.
    fn drop(&mut self) {
        fn open_up(dir: &Path) {
            let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    open_up(&entry.path());
                }
            }
        }
        open_up(self.base.path());
    }
}

impl Lab {
    /// Runs `command` in the sandbox (the result is informative only).
    fn sh(&self, command: &str) -> ToolOutput {
        let out = self
            .tools
            .call("run", json!({"command": command, "timeout_ms": 20_000}));
        assert!(
            !out.text.starts_with("ERROR"),
            "the attack did not run at all: {}",
            out.text
        );
        out
    }

    fn out(&self, name: &str) -> PathBuf {
        self.outside.join(name)
    }
}

type Verdict = Result<(), String>;

fn absent(path: &Path) -> Verdict {
    match std::fs::symlink_metadata(path) {
        Err(_) => Ok(()),
        Ok(_) => Err(format!("{} exists", path.display())),
    }
}

fn unchanged(path: &Path, expected: &str) -> Verdict {
    let now = std::fs::read_to_string(path).unwrap_or_default();
    if now == expected {
        Ok(())
    } else {
        Err(format!("{} now holds {now:?}", path.display()))
    }
}

fn not_in(out: &ToolOutput, secret: &str) -> Verdict {
    if out.text.contains(secret) {
        Err(format!("output shows {secret:?}: {}", out.text))
    } else {
        Ok(())
    }
}

fn none_left(marker: &str) -> Verdict {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = processes_with(marker);
        if left.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("still running: {left:?}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn marker(tag: &str) -> String {
    format!("cubbyesc{tag}{}", std::process::id())
}

/// A python one-liner run with the system interpreter.
fn py(code: &str) -> String {
    format!("/usr/bin/python3 -c '{code}'")
}

// ---------------------------------------------------------------- writes

fn write_absolute_path(l: &Lab) -> Verdict {
    let t = l.out("abs.txt");
    l.sh(&format!("echo pwned > {}", t.display()));
    absent(&t)
}

fn write_dotdot(l: &Lab) -> Verdict {
    l.sh("echo pwned > ../ws-outside/dotdot.txt");
    absent(&l.out("dotdot.txt"))
}

fn write_through_symlink_made_inside(l: &Lab) -> Verdict {
    l.sh(&format!(
        "ln -s {} link && echo pwned > link/sym.txt",
        l.outside.display()
    ));
    absent(&l.out("sym.txt"))
}

fn write_through_proc_self_root(l: &Lab) -> Verdict {
    let t = l.out("procroot.txt");
    l.sh(&format!("echo pwned > /proc/self/root{}", t.display()));
    absent(&t)
}

fn write_through_proc_pid_cwd(l: &Lab) -> Verdict {
    // A host process sitting in the outside directory.
    let mut host = std::process::Command::new("sleep")
        .arg("30")
        .current_dir(&l.outside)
        .spawn()
        .unwrap();
    let pid = host.id();
    l.sh(&format!(
        "echo pwned > /proc/{pid}/cwd/pidcwd.txt; (cd {} && sleep 5) & sleep 0.2; \
         echo pwned > /proc/$!/cwd/pidcwd2.txt",
        l.outside.display()
    ));
    let _ = host.kill();
    let _ = host.wait();
    absent(&l.out("pidcwd.txt")).and(absent(&l.out("pidcwd2.txt")))
}

fn write_through_hard_link(l: &Lab) -> Verdict {
    l.sh(&format!(
        "ln {} hl; echo pwned >> hl",
        l.out("target.txt").display()
    ));
    unchanged(&l.out("target.txt"), "original\n")
}

fn rename_outside_file_in(l: &Lab) -> Verdict {
    l.sh(&format!("mv {} stolen", l.out("target.txt").display()));
    unchanged(&l.out("target.txt"), "original\n")
}

fn chmod_outside_file(l: &Lab) -> Verdict {
    let t = l.out("target.txt");
    let before = std::fs::metadata(&t).unwrap().permissions().mode();
    l.sh(&format!("chmod 777 {}", t.display()));
    let after = std::fs::metadata(&t).unwrap().permissions().mode();
    if before == after {
        Ok(())
    } else {
        Err(format!("mode changed {before:o} -> {after:o}"))
    }
}

fn metadata_outside(l: &Lab) -> Verdict {
    // Landlock does not cover modes, owners, times or extended attributes.
    let target = l.out("target.txt");
    let t = target.display();
    let before = std::fs::metadata(&target).unwrap();
    let dir_before = std::fs::metadata(&l.outside).unwrap();
    let out = l.sh(&format!(
        "touch -d 2001-01-01 {t}; chmod 0777 {d}; chown $(id -u):$(id -g) {t}; {}",
        py(&format!(
            "import os\nfor f in (os.utime, lambda p: os.setxattr(p, \"user.pwned\", b\"1\")):\n  try: f(\"{t}\"); print(\"CHANGED\")\n  except OSError as e: print(e)"
        )),
        d = l.outside.display(),
    ));
    let after = std::fs::metadata(&target).unwrap();
    let dir_after = std::fs::metadata(&l.outside).unwrap();
    use std::os::unix::fs::MetadataExt;
    if after.mtime() != before.mtime() || after.ctime() != before.ctime() {
        return Err(format!("times changed: {}", out.text));
    }
    if dir_after.mode() != dir_before.mode() {
        return Err(format!("directory mode changed: {}", out.text));
    }
    not_in(&out, "CHANGED")
}

fn setid_program_left_in_the_workspace(l: &Lab) -> Verdict {
    // Files a command makes belong to the user running cubby (root in CI):
    // a set-user-ID copy would raise whoever ran it on the host.
    l.sh(&format!(
        "cp /usr/bin/id suid1; chmod 4755 suid1; chmod u+s,g+s suid1; \
         install -m 4755 /usr/bin/id suid2; mkdir d; chmod 2755 d; {}",
        py(
            "import os\nfor p, m in ((\"suid3\", 0o4755), (\"suid4\", 0o2711)):\n  try: os.close(os.open(p, os.O_CREAT | os.O_WRONLY, m))\n  except OSError as e: print(e)\ntry: os.mknod(\"suid5\", 0o100000 | 0o4755)\nexcept OSError as e: print(e)"
        )
    ));
    use std::os::unix::fs::MetadataExt;
    let mut found = Vec::new();
    for entry in std::fs::read_dir(&l.ws).unwrap() {
        let entry = entry.unwrap();
        let mode = entry.metadata().unwrap().mode();
        if mode & 0o6000 != 0 {
            found.push(format!("{:?} {mode:o}", entry.file_name()));
        }
    }
    if found.is_empty() {
        Ok(())
    } else {
        Err(format!("set-ID files made: {found:?}"))
    }
}

fn fake_exit_report(l: &Lab) -> Verdict {
    // Any descriptor beyond stdio gets a forged "exited" report (the shape
    // of the init's): were the server to believe it, the reservations of
    // missing protected paths would end while the command goes on.
    let out = l.sh(&py(
        "import os, socket, struct, time\nextra = []\nfor fd in range(3, 1024):\n  try: os.fstat(fd)\n  except OSError: continue\n  extra.append(fd)\n  try: socket.socket(fileno=fd).send(struct.pack(\"=Iiqq\", 7, 0, 0, 0))\n  except OSError: pass\nprint(\"EXTRA-FDS\", extra)\nend = time.time() + 2\nwhile time.time() < end:\n  for p in (\".mcp.json\", \".codex\", \".claude\"):\n    try: os.mkdir(p); print(\"MADE\", p)\n    except OSError: pass\n  time.sleep(0.05)",
    ));
    if !out.text.contains("EXTRA-FDS []") {
        return Err(format!("descriptors beyond stdio: {}", out.text));
    }
    for p in [".mcp.json", ".codex", ".claude"] {
        absent(&l.ws.join(p)).map_err(|e| format!("{e}: {}", out.text))?;
    }
    not_in(&out, "MADE")
}

fn metadata_of_its_stdio(l: &Lab) -> Verdict {
    // Descriptors are opened host-side, where mounts are writable: a `run`
    // without input must not get the host's /dev/null (root's), whose mode
    // a command of a cubby run as root could change. The probe sets the
    // mode /dev/null has; the kernel still stamps its change time.
    use std::os::unix::fs::MetadataExt;
    let before = std::fs::metadata("/dev/null").unwrap();
    let out = l.sh(&py(
        "import os\nfor fd in (0, 1, 2):\n  try: os.fchmod(fd, 0o666); print(\"FCHMOD-OK\", fd, os.readlink(f\"/proc/self/fd/{fd}\"))\n  except OSError as e: print(fd, e)",
    ));
    let after = std::fs::metadata("/dev/null").unwrap();
    if (after.mode(), after.ctime(), after.ctime_nsec())
        != (before.mode(), before.ctime(), before.ctime_nsec())
    {
        return Err(format!("the host's /dev/null changed: {}", out.text));
    }
    not_in(&out, "/dev/null")
}

fn write_system_directory(l: &Lab) -> Verdict {
    let m = marker("etc");
    l.sh(&format!("echo pwned > /etc/{m}; echo pwned > /usr/{m}"));
    absent(&PathBuf::from(format!("/etc/{m}"))).and(absent(&PathBuf::from(format!("/usr/{m}"))))
}

fn write_host_tmp(l: &Lab) -> Verdict {
    // The sandbox's /tmp is private: writes there never reach the host's.
    let m = marker("tmp");
    l.sh(&format!("echo pwned > /tmp/{m}; echo pwned > /dev/shm/{m}"));
    absent(&PathBuf::from(format!("/tmp/{m}"))).and(absent(&PathBuf::from(format!("/dev/shm/{m}"))))
}

fn read_host_tmp(l: &Lab) -> Verdict {
    let m = marker("hosttmp");
    let path = PathBuf::from(format!("/tmp/{m}"));
    std::fs::write(&path, format!("{m}-secret")).unwrap();
    let out = l.sh(&format!(
        "cat /tmp/{m}; test -e /tmp/{m} && echo VISIBLE; ls /tmp | grep -c cubbyeschosttmp"
    ));
    let _ = std::fs::remove_file(&path);
    not_in(&out, &format!("{m}-secret")).and(not_in(&out, "VISIBLE"))
}

// --------------------------------------------------------------- devices

/// A terminal of the host's: the test's user owns it (as a user owns the
/// terminal they run an agent in), so only the sandbox stands between a
/// command and what is typed into it.
fn read_host_terminal(l: &Lab) -> Verdict {
    use rustix::pty::OpenptFlags;
    use std::io::Write;
    let master = rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).unwrap();
    rustix::pty::grantpt(&master).unwrap();
    rustix::pty::unlockpt(&master).unwrap();
    let name = rustix::pty::ptsname(&master, Vec::new())
        .unwrap()
        .into_string()
        .unwrap();
    let mut master = std::fs::File::from(master);
    // Control: outside the sandbox, the test's user reads typed input.
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(
            rustix::fs::OFlags::NONBLOCK.bits() as i32 | rustix::fs::OFlags::NOCTTY.bits() as i32,
        )
        .open(&name)
        .unwrap();
    master.write_all(b"typed-control\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut seen = String::new();
    while !seen.contains("typed-control") && Instant::now() < deadline {
        let mut buf = [0u8; 64];
        if let Ok(n) = (&slave).read(&mut buf) {
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(seen.contains("typed-control"), "control: read {seen:?}");
    let secret = marker("typed");
    master.write_all(format!("{secret}\n").as_bytes()).unwrap();
    let out = l.sh(&format!(
        "timeout 2 head -n 1 {name}; timeout 2 cat {name}; ls -l /dev/pts"
    ));
    drop(slave);
    not_in(&out, &secret)
}

/// Consoles, disks, `/dev/kvm`, the host's pseudo-terminals: none may be
/// opened, not even for reading. (The sandbox's own pseudo-terminals, on a
/// `devpts` other than the host's, may.)
fn open_host_devices(l: &Lab) -> Verdict {
    use std::os::unix::fs::MetadataExt;
    let host_pts = std::fs::metadata("/dev/pts/ptmx").map_or(0, |m| m.dev());
    let out = l.sh(&py(&format!(
        "import os, stat\nallowed = {{\"/dev/null\", \"/dev/zero\", \"/dev/full\", \"/dev/random\", \"/dev/urandom\", \"/dev/tty\"}}\nfor d, dirs, files in os.walk(\"/dev\"):\n  for n in files:\n    p = os.path.join(d, n)\n    try:\n      st = os.lstat(p)\n      own_pts = p.startswith(\"/dev/pts/\") and st.st_dev != {host_pts}\n      if (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)) and p not in allowed and not own_pts:\n        os.close(os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)); print(\"OPENED\", p)\n    except OSError: pass\nprint(\"walked\")",
    )));
    if !out.text.contains("walked") {
        return Err(format!("the walk did not run: {}", out.text));
    }
    not_in(&out, "OPENED")
}

// ------------------------------------------------------- protected paths

fn protected_existing(l: &Lab) -> Verdict {
    let files = [
        (".git/hooks/pre-commit", "#!/bin/sh\nexit 0\n"),
        (".git/config", "[core]\n"),
        (".mcp.json", "{}\n"),
        (".codex/config.toml", "x = 1\n"),
        (".claude/settings.json", "{}\n"),
        ("cubby.toml", "mode = \"workspace-write\"\n"),
    ];
    for (path, body) in files {
        let p = l.ws.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, body).unwrap();
    }
    l.sh(
        "for f in .git/hooks/pre-commit .git/config .mcp.json .codex/config.toml \
         .claude/settings.json cubby.toml; do echo pwned >> $f; : > $f; rm -f $f; done; \
         echo pwned > .git/hooks/post-checkout; echo pwned > .codex/new; echo pwned > .claude/new",
    );
    for (path, body) in files {
        unchanged(&l.ws.join(path), body)?;
    }
    absent(&l.ws.join(".git/hooks/post-checkout"))?;
    absent(&l.ws.join(".codex/new"))?;
    absent(&l.ws.join(".claude/new"))
}

fn protected_renamed_away(l: &Lab) -> Verdict {
    std::fs::create_dir_all(l.ws.join(".git/hooks")).unwrap();
    std::fs::write(l.ws.join(".git/config"), "[core]\n").unwrap();
    std::fs::create_dir_all(l.ws.join(".claude")).unwrap();
    l.sh(
        "mv .git .git-old; mkdir -p .git/hooks && echo pwned > .git/hooks/pre-commit; \
         mv .claude .claude-old; mkdir .claude && echo pwned > .claude/settings.json; \
         mv .git/hooks .git/hooks-old; rm -rf .git/hooks",
    );
    absent(&l.ws.join(".git/hooks/pre-commit"))?;
    absent(&l.ws.join(".claude/settings.json"))?;
    unchanged(&l.ws.join(".git/config"), "[core]\n")?;
    absent(&l.ws.join(".git-old")).and(absent(&l.ws.join(".claude-old")))
}

fn protected_missing_created(l: &Lab) -> Verdict {
    let out = l.sh(
        "git init -q . ; mkdir -p .git/hooks; echo pwned > .git/hooks/pre-commit; \
         echo pwned > .git/config; echo '{}' > .mcp.json; mkdir .codex; \
         mkdir -p .claude && echo pwned > .claude/settings.json; echo pwned > cubby.toml; \
         ln -s /tmp .codex",
    );
    for p in [".git", ".mcp.json", ".codex", ".claude", "cubby.toml"] {
        absent(&l.ws.join(p))
            .map_err(|e| format!("{e} (no placeholder may stay): {}", out.text))?;
    }
    Ok(())
}

fn protected_missing_after_a_sharing_command_ends(l: &Lab) -> Verdict {
    // A command started while another holds the reservations of the missing
    // protected paths shares them: when the first ends, the second still
    // cannot create them.
    let first = l.tools.call(
        "start_process",
        json!({"name": "holds", "command": "sleep 0.5"}),
    );
    if first.is_error {
        return Err(first.text);
    }
    let out = l.sh("sleep 1.5; mkdir -p .codex/x; echo pwned > .mcp.json; \
         mkdir -p .claude && echo pwned > .claude/settings.json; echo pwned > cubby.toml");
    for p in [".codex", ".mcp.json", ".claude", "cubby.toml"] {
        absent(&l.ws.join(p)).map_err(|e| format!("{e}: {}", out.text))?;
    }
    Ok(())
}

fn protected_path_made_a_symlink(l: &Lab) -> Verdict {
    // A symlink at a protected name cannot be bound read-only: commands
    // must not start at all rather than write through it.
    std::os::unix::fs::symlink(&l.outside, l.ws.join(".claude")).unwrap();
    let out = l.tools.call(
        "run",
        json!({"command": "echo pwned > .claude/settings.json"}),
    );
    if !out.text.starts_with("ERROR unsupported") {
        return Err(format!("a command ran: {}", out.text));
    }
    absent(&l.out("settings.json"))
}

fn deny_read_file(l: &Lab) -> Verdict {
    std::fs::create_dir_all(l.ws.join("secrets")).unwrap();
    let m = marker("denyread");
    std::fs::write(l.ws.join("secrets/key.txt"), &m).unwrap();
    // The sandbox starts (and masks) at its first command.
    let out =
        l.sh("cat secrets/key.txt; ls -la secrets; grep -r . secrets; cp -r secrets s2; cat s2/*");
    not_in(&out, &m)?;
    unchanged(&l.ws.join("secrets/key.txt"), &m)
}

fn deny_read_parent_renamed(l: &Lab) -> Verdict {
    // A directory above a nested deny_read path is carried off to a name
    // nothing hides, then read there (in the same command, and in a later
    // one after the sandbox is made again).
    let secrets = l.ws.join(NESTED_SECRET_DIR);
    std::fs::create_dir_all(&secrets).unwrap();
    let m = marker("denyparent");
    std::fs::write(secrets.join("key.txt"), &m).unwrap();
    let out = l.sh(
        "mv nested moved; mv nested/deep nested/d2; cat moved/deep/secrets/key.txt \
         nested/d2/secrets/key.txt; cp -r nested copy; cat copy/deep/secrets/key.txt",
    );
    not_in(&out, &m)?;
    unchanged(&secrets.join("key.txt"), &m)?;
    let again = lab_with(|_, _, _| {});
    let moved = again.ws.join("nested");
    std::fs::create_dir_all(moved.join("deep/secrets")).unwrap();
    std::fs::write(moved.join("deep/secrets/key.txt"), &m).unwrap();
    let out = again.sh("mv nested/deep/secrets nested/s2; mv nested n2; cat n2/deep/secrets/key.txt nested/s2/key.txt");
    not_in(&out, &m)
}

fn deny_read_through_a_symlinked_parent(l: &Lab) -> Verdict {
    // `nested` is a symbolic link to the real directory: nothing can be
    // mounted on the name, so the sandbox must refuse to run rather than
    // leave the file readable.
    let real = l.ws.join("real/deep/secrets");
    std::fs::create_dir_all(&real).unwrap();
    let m = marker("denysymlink");
    std::fs::write(real.join("key.txt"), &m).unwrap();
    std::os::unix::fs::symlink("real", l.ws.join("nested")).unwrap();
    let out = l.tools.call(
        "run",
        json!({"command": "cat nested/deep/secrets/key.txt real/deep/secrets/key.txt"}),
    );
    not_in(&out, &m)
}

// ------------------------------------------------ what commands read

/// The credential stores SPEC §4 names in every home directory (a concrete
/// name for each pattern) and browser profiles: (path in the home, whether
/// it is a directory, a file inside a directory).
const HOME_STORES: &[(&str, Option<&str>)] = &[
    (".ssh", Some("id_ed25519")),
    (".gnupg", Some("private-keys-v1.d")),
    (".aws", Some("credentials")),
    (".azure", Some("msal_token_cache.json")),
    (".config/gcloud", Some("credentials.db")),
    (".kube", Some("config")),
    (".docker", Some("config.json")),
    (".netrc", None),
    (".git-credentials", None),
    (".npmrc", None),
    (".yarnrc.yml", None),
    (".pypirc", None),
    (".cargo/credentials.toml", None),
    (".config/gh", Some("hosts.yml")),
    (".config/hub", Some("token")),
    (".terraform.d/credentials.tfrc.json", None),
    (".vault-token", None),
    (".codex/auth.json", None),
    (".claude/.credentials.json", None),
    (".claude.json", None),
    (".config/anthropic", Some("api_key")),
    (".config/openai", Some("auth.json")),
    (".mozilla", Some("firefox/profile/cookies.sqlite")),
    (".config/google-chrome", Some("Default/Cookies")),
    (".config/chromium", Some("Default/Login Data")),
];

/// A home directory for the read attacks: a fresh one beneath `/home` as
/// root (covered as "every directory in /home"), the one the parent made
/// for `cubby-escape` (its `$HOME`), or, for another unprivileged invoking
/// user, its own `$HOME` (only what is missing there is made, and removed
/// after).
struct Home {
    path: PathBuf,
    made: Vec<PathBuf>,
    fresh: bool,
}

impl Home {
    fn new(tag: &str) -> Home {
        if is_root() {
            let path = PathBuf::from(format!("/home/cubby-escape-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir(&path).unwrap();
            return Home {
                path,
                made: Vec::new(),
                fresh: true,
            };
        }
        let path = PathBuf::from(std::env::var_os("HOME").expect("HOME"));
        Home {
            fresh: std::env::var_os(CHILD_ENV).is_some(),
            path,
            made: Vec::new(),
        }
    }

    /// Writes `body` at `rel` unless something is there (then `None`).
    fn plant(&mut self, rel: &str, body: &str) -> Option<PathBuf> {
        let path = self.path.join(rel);
        if std::fs::symlink_metadata(&path).is_ok() {
            return None;
        }
        let mut top = self.path.clone();
        for part in Path::new(rel)
            .parent()
            .into_iter()
            .flat_map(Path::components)
        {
            top.push(part);
            if std::fs::symlink_metadata(&top).is_err() {
                std::fs::create_dir(&top).unwrap();
                self.made.push(top.clone());
            }
        }
        std::fs::write(&path, body).unwrap();
        self.made.push(path.clone());
        Some(path)
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        if self.fresh && is_root() {
            let _ = std::fs::remove_dir_all(&self.path);
            return;
        }
        for path in self.made.iter().rev() {
            let _ = std::fs::remove_file(path).or_else(|_| std::fs::remove_dir(path));
        }
    }
}

/// Plants each store of [`HOME_STORES`] (`which` picks them) with a marker
/// of its own; returns (file, marker) for each, read back on the host (the
/// control: the same user reads it outside the sandbox).
fn plant_stores(home: &mut Home, which: impl Fn(usize) -> bool) -> Vec<(PathBuf, String)> {
    let mut planted = Vec::new();
    for (i, (rel, inside)) in HOME_STORES.iter().enumerate() {
        if !which(i) {
            continue;
        }
        let m = marker(&format!("store{i}x"));
        let file = match inside {
            Some(name) => format!("{rel}/{name}"),
            None => rel.to_string(),
        };
        if let Some(path) = home.plant(&file, &m) {
            assert_eq!(
                std::fs::read_to_string(&path).unwrap(),
                m,
                "control: the host cannot read {}",
                path.display()
            );
            planted.push((path, m));
        }
    }
    planted
}

/// Reads each planted file (and lists its directory) from a command; any
/// marker shown is an escape.
fn read_planted(l: &Lab, planted: &[(PathBuf, String)]) -> Verdict {
    let mut script = String::new();
    for (path, _) in planted {
        let p = path.display();
        script.push_str(&format!("cat '{p}'; ls -la \"$(dirname '{p}')\"; "));
    }
    script.push_str("true");
    let out = l.sh(&script);
    for (path, m) in planted {
        not_in(&out, m).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

fn credential_stores_in_a_home(l: &Lab) -> Verdict {
    let _ = l;
    let mut home = Home::new("stores");
    // Half exist when the sandbox starts; the rest are made after its
    // first command (`aws configure` while the agent works).
    let early = plant_stores(&mut home, |i| i % 2 == 0);
    let lab = lab();
    lab.sh("true");
    let late = plant_stores(&mut home, |i| i % 2 == 1);
    if home.fresh && early.len() + late.len() != HOME_STORES.len() {
        return Err(format!("only {} stores planted", early.len() + late.len()));
    }
    read_planted(&lab, &early)?;
    read_planted(&lab, &late)
}

/// The mount options of the mount at `point` in a command's
/// `/proc/self/mountinfo` (the last one there: the one on top).
fn mount_options<'a>(mountinfo: &'a str, point: &Path) -> Option<&'a str> {
    let point = point.to_str()?;
    mountinfo.lines().rev().find_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        (fields.get(4) == Some(&point)).then(|| fields.get(5).copied())?
    })
}

fn credential_masks_made_writable(l: &Lab) -> Verdict {
    // Each mask is an object on one small tmpfs, owned by the sandbox's
    // user: on a writable mount a command could `chmod` it and write
    // there (seen through every mask, and in every later command). Masks
    // made by the holder (early stores) and by a command's init (late).
    let _ = l;
    let mut home = Home::new("maskwrite");
    let chosen = |i: usize| matches!(HOME_STORES[i].0, ".npmrc" | ".aws" | ".netrc" | ".kube");
    let early = plant_stores(&mut home, |i| chosen(i) && i % 2 == 0);
    let lab = lab();
    lab.sh("true");
    let late = plant_stores(&mut home, |i| chosen(i) && i % 2 == 1);
    let masked: Vec<PathBuf> = HOME_STORES
        .iter()
        .enumerate()
        .filter(|(i, _)| chosen(*i))
        .map(|(_, (rel, _))| home.path.join(rel))
        .filter(|p| {
            early
                .iter()
                .chain(&late)
                .any(|(planted, _)| planted.starts_with(p))
        })
        .collect();
    if home.fresh && masked.len() != 4 {
        return Err(format!("only {} stores planted", masked.len()));
    }
    // Control: outside, the same user changes the mode of such a file and
    // writes it (as a command could in the workspace).
    let twin = l.outside.join("twin-store");
    std::fs::write(&twin, "t").unwrap();
    std::fs::set_permissions(&twin, std::fs::Permissions::from_mode(0o000)).unwrap();
    std::fs::set_permissions(&twin, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(&twin, "written").unwrap();
    let m = marker("maskwrite");
    let mut script = String::new();
    for p in &masked {
        let p = p.display();
        script.push_str(&format!(
            "grep -F ' {p} ' /proc/self/mountinfo; chmod 0700 '{p}'; printf {m} > '{p}'; \
             printf {m} > '{p}/f{m}'; "
        ));
    }
    script.push_str("true");
    let out = lab.sh(&script);
    // A later command, and the masks again: nothing written shows, and
    // their mode is still none (Landlock refuses the writes; the mode,
    // owner and times are the mount's to refuse).
    let mut look = String::new();
    for p in &masked {
        let p = p.display();
        look.push_str(&format!(
            "cat '{p}' '{p}'/*; ls -la '{p}'; stat -c 'mode %a' '{p}'; "
        ));
    }
    look.push_str("true");
    let seen = lab.sh(&look);
    not_in(&seen, &m)?;
    if seen.text.matches("mode 0\n").count() != masked.len() {
        return Err(format!("a mask's mode changed: {}", seen.text));
    }
    for p in &masked {
        let options = mount_options(&out.text, p)
            .ok_or_else(|| format!("{}: no mount there: {}", p.display(), out.text))?;
        for want in ["ro", "nosuid", "nodev", "noexec"] {
            if !options.split(',').any(|o| o == want) {
                return Err(format!("{}: mounted {options}, not {want}", p.display()));
            }
        }
    }
    Ok(())
}

fn credential_store_replaced_on_the_host(l: &Lab) -> Verdict {
    // A store masked when the sandbox started is rewritten the way tools
    // save (a new file renamed over it): the mask leaves with the old name.
    let _ = l;
    let mut home = Home::new("replaced");
    let planted = plant_stores(&mut home, |i| HOME_STORES[i].0 == ".claude.json");
    let lab = lab();
    read_planted(&lab, &planted)?;
    let mut renewed = Vec::new();
    for (path, _) in &planted {
        let m = marker("renewed");
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, &m).unwrap();
        std::fs::rename(&tmp, path).unwrap();
        renewed.push((path.clone(), m));
    }
    read_planted(&lab, &renewed)
}

fn host_secrets(l: &Lab) -> Verdict {
    // The host's own secrets, where this user can read them outside (as
    // root: all of them): not from a command.
    let mut files: Vec<PathBuf> = [
        "/etc/shadow",
        "/etc/gshadow",
        "/etc/shadow-",
        "/etc/gshadow-",
        "/etc/sudoers",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    for entry in std::fs::read_dir("/etc/ssh")
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("ssh_host_") && name.ends_with("_key") {
            files.push(entry.path());
        }
    }
    let home = PathBuf::from(std::env::var_os("HOME").unwrap_or_default());
    for (rel, inside) in HOME_STORES {
        if inside.is_none() {
            files.push(home.join(rel));
        }
    }
    let readable: Vec<(PathBuf, String)> = files
        .into_iter()
        .filter_map(|f| {
            let bytes = std::fs::read(&f).ok().filter(|b| b.len() >= 8)?;
            // Compared by digest: the secret itself never reaches the logs.
            let digest = std::process::Command::new("sha256sum")
                .arg(&f)
                .output()
                .ok()?;
            let _ = bytes;
            let digest = String::from_utf8_lossy(&digest.stdout)
                .split_whitespace()
                .next()?
                .to_string();
            Some((f, digest))
        })
        .collect();
    if is_root() && !readable.iter().any(|(f, _)| f == Path::new("/etc/shadow")) {
        return Err("control: root cannot read /etc/shadow on the host".into());
    }
    let mut script = String::new();
    for (f, _) in &readable {
        script.push_str(&format!("sha256sum < '{}'; ", f.display()));
    }
    script.push_str("true");
    let out = l.sh(&script);
    for (f, digest) in &readable {
        not_in(&out, digest).map_err(|_| format!("{} was read", f.display()))?;
    }
    Ok(())
}

fn deny_read_created_after_start(l: &Lab) -> Verdict {
    // The host makes deny_read paths after the sandbox started (a `.env`
    // written by the user's tooling), and rewrites one by renaming a new
    // file over it.
    l.sh("true");
    let m = marker("lateenv");
    std::fs::write(l.ws.join(".env"), &m).unwrap();
    let secrets = l.ws.join(NESTED_SECRET_DIR);
    std::fs::create_dir_all(&secrets).unwrap();
    std::fs::write(secrets.join("key.txt"), &m).unwrap();
    let out = l.sh(
        "cat .env; cp .env e2; cat e2; mv nested moved; cat moved/deep/secrets/key.txt \
         nested/deep/secrets/key.txt",
    );
    not_in(&out, &m)?;
    unchanged(&secrets.join("key.txt"), &m)?;
    absent(&l.ws.join("moved"))?;
    let m2 = marker("renewedenv");
    std::fs::write(l.ws.join(".env.new"), &m2).unwrap();
    std::fs::rename(l.ws.join(".env.new"), l.ws.join(".env")).unwrap();
    let out = l.sh("cat .env");
    not_in(&out, &m2)?;
    unchanged(&l.ws.join(".env"), &m2)
}

fn read_scope_system(l: &Lab) -> Verdict {
    // With `read_scope = "system"` a file in the user's home (not on PATH)
    // is out of reach; the workspace, a readable root and the toolchains on
    // PATH are not. Control: the default scope reads the same file.
    let mut home = Home::new("scope");
    let m = marker("notes");
    let notes = home
        .plant(&format!("notes-{}.txt", std::process::id()), &m)
        .expect("a fresh notes file");
    let cat = format!("cat '{}'", notes.display());
    let control = l.sh(&cat);
    if !control.text.contains(&m) {
        return Err(format!(
            "control: read_scope host cannot read it: {}",
            control.text
        ));
    }
    let sys = lab_with(|p, _, ws| {
        p.read_scope(cubby::ReadScope::System)
            .readable_roots([ws.with_file_name("ws-outside")]);
    });
    std::fs::write(sys.ws.join("inside.txt"), "in the workspace\n").unwrap();
    std::fs::write(sys.outside.join("target.txt"), "readable root\n").unwrap();
    let out = sys.sh(&format!("{cat}; ls '{}'", home.path.display()));
    not_in(&out, &m)?;
    let mut tools = vec![
        ("git --version", "git version"),
        ("python3 -c 'print(6*7)'", "42"),
    ];
    let has = |tool: &str| {
        std::process::Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if has("cargo") {
        tools.push(("cargo --version", "cargo "));
    }
    let mut script = format!(
        "cat inside.txt '{}'; ",
        sys.outside.join("target.txt").display()
    );
    for (command, _) in &tools {
        script.push_str(command);
        script.push_str("; ");
    }
    let out = sys.sh(&script);
    for expected in ["in the workspace", "readable root"]
        .into_iter()
        .chain(tools.iter().map(|(_, e)| *e))
    {
        if !out.text.contains(expected) {
            return Err(format!(
                "{expected:?} missing (read_scope = system): {}",
                out.text
            ));
        }
    }
    Ok(())
}

// --------------------------------------------------------------- network

fn tcp_to_host_loopback(l: &Lab) -> Verdict {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    l.sh(&format!(
        "echo hi > /dev/tcp/127.0.0.1/{port}; {}",
        py(&format!(
            "import socket; socket.create_connection((\"127.0.0.1\", {port}), 2)"
        ))
    ));
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
        other => Err(format!("the host listener saw {other:?}")),
    }
}

fn udp_to_host_loopback(l: &Lab) -> Verdict {
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_nonblocking(true).unwrap();
    let port = sock.local_addr().unwrap().port();
    l.sh(&format!(
        "echo hi > /dev/udp/127.0.0.1/{port}; {}",
        py(&format!(
            "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b\"x\", (\"127.0.0.1\", {port}))"
        ))
    ));
    std::thread::sleep(Duration::from_millis(100));
    let mut buf = [0u8; 16];
    match sock.recv_from(&mut buf) {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
        other => Err(format!("the host socket received {other:?}")),
    }
}

fn dns_lookup(l: &Lab) -> Verdict {
    let out = l.sh(&format!(
        "getent hosts localhost.localdomain.invalid example.com; {}; echo rc=$?",
        py("import socket; print(\"RESOLVED\", socket.getaddrinfo(\"example.com\", 80))")
    ));
    not_in(&out, "RESOLVED")
}

fn raw_and_packet_sockets(l: &Lab) -> Verdict {
    let out = l.sh(&py(
        "import socket\nfor f, t in ((socket.AF_INET, socket.SOCK_RAW), (socket.AF_PACKET, socket.SOCK_RAW), (socket.AF_INET6, socket.SOCK_DGRAM), (socket.AF_NETLINK, socket.SOCK_RAW)):\n  try:\n    socket.socket(f, t, 1 if t == socket.SOCK_RAW and f == socket.AF_INET else 0); print(\"OPENED\", f)\n  except OSError as e: print(\"refused\", f, e.errno)",
    ));
    not_in(&out, "OPENED")
}

fn abstract_unix_socket_of_host(l: &Lab) -> Verdict {
    use std::os::linux::net::SocketAddrExt;
    let name = marker("abstract");
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let listener = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    listener.set_nonblocking(true).unwrap();
    l.sh(&py(&format!(
        "import socket; s=socket.socket(socket.AF_UNIX); s.connect(\"\\0{name}\")"
    )));
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
        other => Err(format!("the host socket accepted {other:?}")),
    }
}

// ------------------------------------------------------------- processes

fn ptrace_sibling(l: &Lab) -> Verdict {
    let out = l.sh(&format!(
        "sleep 5 & {}",
        py(
            "import ctypes, os, subprocess; libc=ctypes.CDLL(None, use_errno=True); p=subprocess.Popen([\"sleep\", \"5\"]); r=libc.ptrace(16, p.pid, 0, 0); print(\"ATTACHED\" if r == 0 else \"refused\", ctypes.get_errno()); p.kill()"
        )
    ));
    not_in(&out, "ATTACHED")
}

fn signal_host_process(l: &Lab) -> Verdict {
    let m = marker("victim");
    let mut host = std::process::Command::new("bash")
        .args(["-c", &format!("exec -a {m} sleep 30")])
        .spawn()
        .unwrap();
    let pid = host.id();
    l.sh(&format!("kill -9 {pid}; pkill -9 -f {m}; kill -9 -1"));
    let alive = host.try_wait().unwrap().is_none();
    let _ = host.kill();
    let _ = host.wait();
    if alive {
        Ok(())
    } else {
        Err(format!("host process {pid} was killed"))
    }
}

fn proc_view_of_host(l: &Lab) -> Verdict {
    let m = marker("visible");
    let mut host = std::process::Command::new("bash")
        .args(["-c", &format!("exec -a {m} sleep 30")])
        .spawn()
        .unwrap();
    let pid = host.id();
    let out = l.sh(&format!(
        "ps auxww; cat /proc/{pid}/cmdline; ls /proc/{pid}; cat /proc/1/cmdline; echo; ls /proc | grep -c '^[0-9]'"
    ));
    let _ = host.kill();
    let _ = host.wait();
    not_in(&out, &m)
}

fn read_the_inits_memory(l: &Lab) -> Verdict {
    // The pid-1 init is a copy of the server's memory: neither its memory
    // nor its environment may be readable.
    let out = l.sh(&py(
        "import os\ntry:\n  print(\"READ environ\", len(open(\"/proc/1/environ\", \"rb\").read()))\nexcept OSError as e: print(\"refused environ\", e.errno)\ntry:\n  start = int(open(\"/proc/1/maps\").readline().split(\"-\")[0], 16)\n  f = open(\"/proc/1/mem\", \"rb\"); f.seek(start); print(\"READ mem\", len(f.read(64)))\nexcept OSError as e: print(\"refused mem\", e.errno)",
    ));
    not_in(&out, "READ")
}

fn mount_inside(l: &Lab) -> Verdict {
    let out = l.sh(
        "mkdir -p m; mount -t tmpfs none m && echo MOUNTED; mount --bind / m && echo MOUNTED; \
         umount /proc && echo UNMOUNTED",
    );
    not_in(&out, "MOUNTED")
}

fn unshare_user_namespace(l: &Lab) -> Verdict {
    let out = l.sh(
        "unshare -Ur sh -c 'echo REGAINED $(id -u)'; unshare -Urm true && echo REGAINED; \
         grep CapEff /proc/self/status",
    );
    not_in(&out, "REGAINED")?;
    if out.text.contains("CapEff:\t0000000000000000") {
        Ok(())
    } else {
        Err(format!("capabilities left: {}", out.text))
    }
}

fn setuid_binary(l: &Lab) -> Verdict {
    // A set-user-ID copy of `id` owned by the test's user (root in CI).
    let dir = tempfile::Builder::new()
        .prefix("cubby-suid-")
        .tempdir_in(LAB_BASE)
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let copy = dir.path().join("suid-id");
    std::fs::copy("/usr/bin/id", &copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let out = l.sh(&format!(
        "{} -u; {} -u; grep -E 'CapEff|NoNewPrivs' /proc/self/status",
        copy.display(),
        "/usr/bin/su -c id root 2>&1 || true; /usr/bin/id"
    ));
    // The copy must not raise privileges: no_new_privs set, no capabilities.
    if out.text.contains("NoNewPrivs:\t1") && out.text.contains("CapEff:\t0000000000000000") {
        Ok(())
    } else {
        Err(out.text)
    }
}

fn io_uring_setup(l: &Lab) -> Verdict {
    let out = l.sh(&py(
        "import ctypes; libc=ctypes.CDLL(None, use_errno=True); p=ctypes.create_string_buffer(120); r=libc.syscall(425, 8, p); print(\"URING\" if r >= 0 else \"refused\", ctypes.get_errno())",
    ));
    not_in(&out, "URING")
}

fn kernel_interfaces(l: &Lab) -> Verdict {
    // bpf, perf_event_open, keyctl, userfaultfd, open_by_handle_at, kexec_load, init_module.
    let out = l.sh(&py(
        "import ctypes; libc=ctypes.CDLL(None, use_errno=True)\nfor nr, args in ((321, (0, 0, 0)), (298, (0, 0, -1, -1, 0)), (250, (0, 0)), (323, (0,)), (304, (0, 0, 0)), (246, (0, 0, 0, 0)), (175, (0, 0, 0))):\n  r = libc.syscall(nr, *args); e = ctypes.get_errno()\n  print(\"ALLOWED\" if r >= 0 or e not in (1,) else \"refused\", nr, r, e)",
    ));
    not_in(&out, "ALLOWED")
}

fn fork_bomb(l: &Lab) -> Verdict {
    let m = marker("bomb");
    let started = Instant::now();
    let out = l.tools.call(
        "run",
        json!({"command": format!("bomb() {{ bash -c 'exec -a {m} sleep 60' & bomb & bomb; }}; bomb"), "timeout_ms": 4000}),
    );
    if started.elapsed() > Duration::from_secs(30) {
        return Err(format!("took {:?}: {}", started.elapsed(), out.text));
    }
    none_left(&m)?;
    // The host still forks.
    std::process::Command::new("true")
        .status()
        .map_err(|e| format!("host cannot fork: {e}"))?;
    Ok(())
}

fn memory_bomb(l: &Lab) -> Verdict {
    let out = l.sh(&py(
        "x = bytearray(3 * 1024 ** 3); print(\"ALLOCATED\", len(x))",
    ));
    not_in(&out, "ALLOCATED")
}

fn disk_filler(l: &Lab) -> Verdict {
    l.sh("head -c 64M /dev/zero > big.bin; ls -l big.bin");
    let len = std::fs::metadata(l.ws.join("big.bin"))
        .map(|m| m.len())
        .unwrap_or(0);
    if len <= TEST_FILE_SIZE_MB * 1024 * 1024 {
        Ok(())
    } else {
        Err(format!("wrote {len} bytes"))
    }
}

fn daemon_outlives_command(l: &Lab) -> Verdict {
    let m = marker("daemon");
    l.sh(&format!(
        "setsid bash -c 'exec -a {m} sleep 120' < /dev/null > /dev/null 2>&1 & \
         (bash -c 'exec -a {m} sleep 120' &) ; nohup bash -c 'exec -a {m} sleep 120' >/dev/null 2>&1 & echo started"
    ));
    none_left(&m)
}

fn ignores_sigterm(l: &Lab) -> Verdict {
    let m = marker("stubborn");
    let out = l.tools.call(
        "start_process",
        json!({"name": "stubborn", "command": format!("trap '' TERM; exec -a {m} bash -c \"trap '' TERM; while :; do sleep 1; done\"")}),
    );
    if out.is_error {
        return Err(out.text);
    }
    std::thread::sleep(Duration::from_millis(300));
    if processes_with(&m).is_empty() {
        return Err("the process did not start".into());
    }
    let out = l.tools.call("stop_process", json!({"name": "stubborn"}));
    if out.is_error {
        return Err(out.text);
    }
    none_left(&m)
}

fn hostname_and_ipc(l: &Lab) -> Verdict {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let out = l.sh("hostname cubby-pwned; cat /proc/sys/kernel/hostname");
    let after = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    if after != host {
        return Err(format!("host name changed to {after}"));
    }
    not_in(&out, "cubby-pwned\ncubby-pwned")
}

fn writable_root_boundary(l: &Lab) -> Verdict {
    // A sibling whose name extends the root's (`ws` / `ws-outside`).
    l.sh(&format!(
        "echo pwned > {}/prefix.txt; cd ..; echo pwned > ws-outside/prefix2.txt",
        l.outside.display()
    ));
    absent(&l.out("prefix.txt")).and(absent(&l.out("prefix2.txt")))
}

fn read_only_mode(l: &Lab) -> Verdict {
    let _ = l;
    // Commands offered in `read-only` (the mode itself gives none).
    let ro = lab_with(|p, _, _| {
        p.mode(cubby::Mode::ReadOnly).allow(["run"]);
    });
    let file = ro.ws.join("kept.txt");
    std::fs::write(&file, "kept\n").unwrap();
    use std::os::unix::fs::MetadataExt;
    let before = std::fs::metadata(&file).unwrap();
    ro.sh("echo pwned > inside.txt; mkdir d; chmod 000 kept.txt; touch -d 2001-01-01 kept.txt");
    let after = std::fs::metadata(&file).unwrap();
    if (after.mode(), after.mtime(), after.ctime())
        != (before.mode(), before.mtime(), before.ctime())
    {
        return Err("kept.txt's mode or times changed".into());
    }
    absent(&ro.ws.join("inside.txt")).and(absent(&ro.ws.join("d")))
}

// ------------------------------------- git's executable surface (issue 13)

/// A lab whose workspace `prepare` sets up on the host first (a repository,
/// its config), with a policy that reads that workspace's git config (as
/// the CLI's does) and protects `protect` on top.
fn git_lab(protect: &[&str], prepare: impl FnOnce(&Path)) -> Lab {
    let (base, ws, outside) = lab_dirs();
    prepare(&ws);
    let mut policy = Policy::builder();
    policy.git_of(&ws, &HostEnv::capture());
    for p in protect {
        policy.protect(*p);
    }
    let mut limits = Limits::default();
    limits.sandbox.processes = TEST_PROCESSES;
    let policy = policy.limits(limits).build().unwrap();
    open_lab(base, ws, outside, policy)
}

/// The host's git in `dir` (an identity given, so that `commit` runs).
fn host_git(dir: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.name=cubby",
            "-c",
            "user.email=cubby@example.invalid",
        ])
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

/// A git config whose fsmonitor creates `marker` when the host's git runs.
fn fsmonitor_config(marker: &Path) -> String {
    format!(
        "[core]\n\trepositoryformatversion = 0\n\tfsmonitor = \"touch {}; false\"\n",
        marker.display()
    )
}

/// Runs the host's `git status` (and `git commit`, when `commit`) in the
/// workspace; `Err` when `marker` appeared: the host ran the attacker's code.
fn host_git_runs_nothing(dir: &Path, marker: &Path, commit: bool) -> Verdict {
    host_git(dir, &["status", "--short"]);
    if commit {
        host_git(
            dir,
            &["commit", "-q", "--allow-empty", "-m", "after the agent"],
        );
    }
    match marker.exists() {
        true => Err(format!(
            "the host's git ran the attacker's code ({} exists)",
            marker.display()
        )),
        false => Ok(()),
    }
}

/// The control of an attack: `attack` done on the host itself (no
/// sandbox, no tools) in a twin of the workspace that `prepare` set up
/// alike; the host's git must then run the marker, else the oracle proves
/// nothing.
fn control_runs(
    l: &Lab,
    prepare: impl FnOnce(&Path),
    attack: impl FnOnce(&Path, &Path),
    commit: bool,
) -> Verdict {
    let twin = l.base.path().join("twin");
    std::fs::create_dir(&twin).unwrap();
    prepare(&twin);
    let marker = l.out("control-ran");
    attack(&twin, &marker);
    host_git(&twin, &["status", "--short"]);
    if commit {
        host_git(&twin, &["commit", "-q", "--allow-empty", "-m", "control"]);
    }
    if marker.exists() {
        Ok(())
    } else {
        Err("control: the same writes outside the sandbox did not make git run the marker".into())
    }
}

fn write(l: &Lab, path: &str, content: &str) -> ToolOutput {
    l.tools
        .call("write_file", json!({"path": path, "content": content}))
}

/// An empty repository (HEAD, objects, refs) under `dir`, configured by `config`.
fn bare_repo(dir: &Path, config: &str) {
    std::fs::create_dir_all(dir.join("objects")).unwrap();
    std::fs::create_dir_all(dir.join("refs/heads")).unwrap();
    std::fs::write(dir.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(dir.join("config"), config).unwrap();
}

fn init(dir: &Path) {
    let out = host_git(dir, &["init", "-q", "-b", "main", "."]);
    assert!(out.status.success(), "git init: {out:?}");
}

fn gitfile_made_by_the_tools(_: &Lab) -> Verdict {
    let l = git_lab(&[], |_| {});
    control_runs(
        &l,
        |_| {},
        |twin, marker| {
            std::fs::write(twin.join(".git"), "gitdir: evil\n").unwrap();
            bare_repo(&twin.join("evil"), &fsmonitor_config(marker));
        },
        false,
    )?;
    let marker = l.out("ran");
    let config = fsmonitor_config(&marker);
    let out = write(&l, ".git", "gitdir: evil\n");
    for (path, content) in [
        ("evil/HEAD", "ref: refs/heads/main\n"),
        ("evil/objects/.keep", ""),
        ("evil/refs/heads/.keep", ""),
        ("evil/config", config.as_str()),
    ] {
        write(&l, path, content);
    }
    // And by a command.
    l.sh("printf 'gitdir: evil\\n' > .git");
    if !out.text.starts_with("ERROR denied") {
        return Err(format!("write_file .git: {}", out.text));
    }
    absent(&l.ws.join(".git"))?;
    host_git_runs_nothing(&l.ws, &marker, false)
}

fn new_git_dir_with_commondir(_: &Lab) -> Verdict {
    // No repository: the tools make one whose common dir is theirs.
    let l = git_lab(&[], |_| {});
    let attack = |ws: &Path, marker: &Path| {
        std::fs::create_dir_all(ws.join(".git")).unwrap();
        std::fs::write(ws.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(ws.join(".git/commondir"), "../common\n").unwrap();
        bare_repo(&ws.join("common"), &fsmonitor_config(marker));
    };
    control_runs(&l, |_| {}, attack, false)?;
    let marker = l.out("ran");
    let config = fsmonitor_config(&marker);
    let head = write(&l, ".git/HEAD", "ref: refs/heads/main\n");
    let common = write(&l, ".git/commondir", "../common\n");
    for (path, content) in [
        ("common/HEAD", "ref: refs/heads/main\n"),
        ("common/objects/.keep", ""),
        ("common/refs/heads/.keep", ""),
        ("common/config", config.as_str()),
    ] {
        write(&l, path, content);
    }
    if !head.text.starts_with("ERROR denied") || !common.text.starts_with("ERROR denied") {
        return Err(format!("{} / {}", head.text, common.text));
    }
    absent(&l.ws.join(".git"))?;
    host_git_runs_nothing(&l.ws, &marker, false)?;
    // A repository the user made: a command and the tools write its
    // `commondir` (and `config.worktree`, `gitdir`).
    let l = git_lab(&[], init);
    let marker = l.out("ran2");
    let config = fsmonitor_config(&marker);
    let by_tool = write(&l, ".git/commondir", "../common\n");
    let by_tool2 = write(&l, ".git/config.worktree", &config);
    std::fs::create_dir(l.ws.join("common")).unwrap();
    bare_repo(&l.ws.join("common"), &config);
    let out = l.sh(
        "echo ../common > .git/commondir; rm -f .git/commondir; mv .git/commondir .git/c2; \
         echo x > .git/gitdir; git config --file .git/config.worktree core.fsmonitor 'touch x'; \
         git status --short >/dev/null; echo done",
    );
    if !by_tool.text.starts_with("ERROR denied") || !by_tool2.text.starts_with("ERROR denied") {
        return Err(format!("{} / {}", by_tool.text, by_tool2.text));
    }
    for p in [
        ".git/commondir",
        ".git/config.worktree",
        ".git/gitdir",
        ".git/c2",
    ] {
        absent(&l.ws.join(p)).map_err(|e| format!("{e}: {}", out.text))?;
    }
    if !out.text.contains("done") {
        return Err(format!("git inside failed: {}", out.text));
    }
    host_git_runs_nothing(&l.ws, &marker, false)
}

/// A config that makes a directory holding `HEAD`, `objects/` and `refs/`
/// a repository with `worktree` as its work tree, whose fsmonitor creates
/// `marker` when the host's git runs there.
fn bare_with_worktree(worktree: &Path, marker: &Path) -> String {
    format!(
        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = {}\n\tfsmonitor = \"touch {}; false\"\n",
        worktree.display(),
        marker.display()
    )
}

/// The red-team pass of issue 13: when `.git` is missing or not a valid
/// repository, git takes the directory itself for a bare repository if it
/// holds `HEAD`, `objects/` and `refs/`; a `config` there with a
/// `core.worktree` then runs its fsmonitor (and its `hooks/`) on the host.
/// So the root's `HEAD` is protected, present or missing: by a command in a
/// repository the user made (whose `.git/HEAD` stays writable), by the
/// tools alone, and by a command in a workspace that is no repository.
fn workspace_root_made_a_bare_repository(_: &Lab) -> Verdict {
    let bare_root = |ws: &Path, marker: &Path| {
        let _ = std::fs::remove_file(ws.join(".git/HEAD"));
        std::fs::create_dir_all(ws.join("objects")).unwrap();
        std::fs::create_dir_all(ws.join("refs")).unwrap();
        std::fs::write(ws.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(ws.join("config"), bare_with_worktree(ws, marker)).unwrap();
    };
    let repo = |ws: &Path| {
        init(ws);
        std::fs::write(ws.join("f"), "hi\n").unwrap();
        host_git(ws, &["add", "f"]);
        host_git(ws, &["commit", "-q", "-m", "first"]);
    };
    // 1. A command, in a repository the user made.
    let l = git_lab(&[], repo);
    control_runs(&l, repo, bare_root, false)?;
    let marker = l.out("ran-cmd");
    std::fs::write(l.out("config"), bare_with_worktree(&l.ws, &marker)).unwrap();
    l.sh(&format!(
        "rm -f .git/HEAD; mkdir -p objects refs; echo 'ref: refs/heads/main' > HEAD; cp {} config",
        l.out("config").display()
    ));
    host_git_runs_nothing(&l.ws, &marker, false)?;
    // 2. The tools alone (read before write of `.git/HEAD`, as the guard asks).
    let l = git_lab(&[], repo);
    let marker = l.out("ran-tools");
    let config = bare_with_worktree(&l.ws, &marker);
    l.tools.call("read_file", json!({"path": ".git/HEAD"}));
    write(&l, ".git/HEAD", "garbage\n");
    let head = write(&l, "HEAD", "ref: refs/heads/main\n");
    for (path, content) in [
        ("objects/.keep", ""),
        ("refs/.keep", ""),
        ("config", config.as_str()),
    ] {
        write(&l, path, content);
    }
    if !head.text.starts_with("ERROR denied") {
        return Err(format!("write_file HEAD: {}", head.text));
    }
    host_git_runs_nothing(&l.ws, &marker, false)?;
    // 3. A command, in a workspace that is no repository: fsmonitor and a
    // pre-commit hook, judged by the host's `git status` and `git commit`.
    let l = git_lab(&[], |_| {});
    let marker = l.out("ran-plain");
    std::fs::write(l.out("config"), bare_with_worktree(&l.ws, &marker)).unwrap();
    l.sh(&format!(
        "mkdir -p objects refs hooks; echo 'ref: refs/heads/main' > HEAD; cp {} config; \
         printf '#!/bin/sh\\ntouch {}\\n' > hooks/pre-commit; chmod +x hooks/pre-commit",
        l.out("config").display(),
        marker.display()
    ));
    host_git_runs_nothing(&l.ws, &marker, true)
}

fn worktree_gitfile_rewritten(_: &Lab) -> Verdict {
    // The workspace is a linked worktree: `.git` is a gitfile naming the
    // main repository's git dir outside.
    let prepare = |ws: &Path| {
        let main = ws.parent().unwrap().join(format!(
            "main-{}",
            ws.file_name().unwrap().to_string_lossy()
        ));
        std::fs::create_dir(&main).unwrap();
        init(&main);
        host_git(&main, &["commit", "-q", "--allow-empty", "-m", "init"]);
        std::fs::remove_dir(ws).unwrap();
        let out = host_git(&main, &["worktree", "add", "-q", ws.to_str().unwrap()]);
        assert!(out.status.success(), "worktree add: {out:?}");
    };
    let l = git_lab(&[], prepare);
    control_runs(
        &l,
        prepare,
        |twin, marker| {
            std::fs::write(twin.join(".git"), "gitdir: evil\n").unwrap();
            bare_repo(&twin.join("evil"), &fsmonitor_config(marker));
        },
        false,
    )?;
    let before = std::fs::read_to_string(l.ws.join(".git")).unwrap();
    let marker = l.out("ran");
    let config = fsmonitor_config(&marker);
    l.tools.call("read_file", json!({"path": ".git"}));
    let out = write(&l, ".git", "gitdir: evil\n");
    for (path, content) in [
        ("evil/HEAD", "ref: refs/heads/main\n"),
        ("evil/objects/.keep", ""),
        ("evil/refs/heads/.keep", ""),
        ("evil/config", config.as_str()),
    ] {
        write(&l, path, content);
    }
    l.sh(
        "printf 'gitdir: evil\\n' > .git; rm -f .git; mv .git .git-old; echo 'gitdir: evil' > .git",
    );
    if !out.text.starts_with("ERROR denied") {
        return Err(format!("write_file .git: {}", out.text));
    }
    unchanged(&l.ws.join(".git"), &before)?;
    host_git_runs_nothing(&l.ws, &marker, false)
}

fn hooks_path_in_the_tree(_: &Lab) -> Verdict {
    // husky's layout: `core.hooksPath = .husky`, a pre-commit hook there.
    let prepare = |ws: &Path| {
        init(ws);
        host_git(ws, &["config", "core.hooksPath", ".husky"]);
        std::fs::create_dir(ws.join(".husky")).unwrap();
        std::fs::write(ws.join(".husky/pre-commit"), "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(
            ws.join(".husky/pre-commit"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
    };
    let hook = |marker: &Path| format!("#!/bin/sh\ntouch {}\n", marker.display());
    let l = git_lab(&[], prepare);
    control_runs(
        &l,
        prepare,
        |twin, marker| std::fs::write(twin.join(".husky/pre-commit"), hook(marker)).unwrap(),
        true,
    )?;
    let marker = l.out("ran");
    l.tools
        .call("read_file", json!({"path": ".husky/pre-commit"}));
    let by_tool = write(&l, ".husky/pre-commit", &hook(&marker));
    let new_hook = hook(&marker).replace('\n', "\\n");
    l.sh(&format!(
        "printf '{new_hook}' > .husky/post-commit; chmod +x .husky/post-commit; \
         printf '{new_hook}' > .husky/pre-commit; mv .husky .husky-old; mkdir .husky; \
         printf '{new_hook}' > .husky/pre-commit; chmod +x .husky/pre-commit"
    ));
    if !by_tool.text.starts_with("ERROR denied") {
        return Err(format!("write_file .husky/pre-commit: {}", by_tool.text));
    }
    unchanged(&l.ws.join(".husky/pre-commit"), "#!/bin/sh\nexit 0\n")?;
    host_git_runs_nothing(&l.ws, &marker, true)?;
    // A hooks path that does not exist yet is not created either.
    let l = git_lab(&[], |ws| {
        init(ws);
        host_git(ws, &["config", "core.hooksPath", ".githooks"]);
    });
    let marker = l.out("ran2");
    let h = hook(&marker).replace('\n', "\\n");
    l.sh(&format!(
        "mkdir -p .githooks && printf '{h}' > .githooks/pre-commit && chmod +x .githooks/pre-commit"
    ));
    absent(&l.ws.join(".githooks"))?;
    host_git_runs_nothing(&l.ws, &marker, true)
}

fn protected_config_parent_renamed(_: &Lab) -> Verdict {
    let attack =
        "mv conf conf.old && mkdir conf && echo 'mode = \"full-access\"' > conf/cubby.toml";
    let prepare = |ws: &Path| {
        std::fs::create_dir(ws.join("conf")).unwrap();
        std::fs::write(ws.join("conf/cubby.toml"), "mode = \"workspace-write\"\n").unwrap();
    };
    let l = git_lab(&["conf/cubby.toml"], prepare);
    // Control: the same command on the host replaces the file.
    let twin = l.base.path().join("twin");
    std::fs::create_dir(&twin).unwrap();
    prepare(&twin);
    std::process::Command::new("sh")
        .args(["-c", attack])
        .current_dir(&twin)
        .status()
        .unwrap();
    if unchanged(
        &twin.join("conf/cubby.toml"),
        "mode = \"workspace-write\"\n",
    )
    .is_ok()
    {
        return Err("control: the command did not replace the file on the host".into());
    }
    let out = l.sh(&format!("{attack}; rm -rf conf; echo tried"));
    unchanged(
        &l.ws.join("conf/cubby.toml"),
        "mode = \"workspace-write\"\n",
    )
    .map_err(|e| format!("{e}: {}", out.text))?;
    absent(&l.ws.join("conf.old"))
}

fn placeholder_contamination(_: &Lab) -> Verdict {
    // While a command holds the reservation of a missing `.git`, the tools
    // write beneath it (root could, permissions notwithstanding).
    let l = git_lab(&[], |_| {});
    let held = l.tools.call(
        "start_process",
        json!({"name": "holds", "command": "sleep 1"}),
    );
    if held.is_error {
        return Err(held.text);
    }
    let out = write(&l, ".git/settings.json", "{\"evil\": true}");
    let mcp = write(&l, ".mcp.json/settings.json", "{\"evil\": true}");
    l.sh("sleep 1.5");
    if !out.text.starts_with("ERROR denied") || !mcp.text.starts_with("ERROR") {
        return Err(format!("{} / {}", out.text, mcp.text));
    }
    absent(&l.ws.join(".git"))?;
    absent(&l.ws.join(".mcp.json"))?;
    // Nothing of it in any stash, and another workspace's command sees its
    // protected paths empty.
    let other = git_lab(&[], |_| {});
    let seen = other.sh("ls -A .git .mcp.json .claude .codex 2>&1; echo listed");
    if seen.text.contains("settings.json") {
        return Err(format!("another workspace sees it: {}", seen.text));
    }
    let base = std::env::temp_dir().join(format!(
        "cubby-reserve-{}",
        rustix::process::getuid().as_raw()
    ));
    // This process's stashes (older processes' leftovers are not ours to judge).
    let ours = format!("{}-", std::process::id());
    for entry in std::fs::read_dir(&base).into_iter().flatten().flatten() {
        if !entry.file_name().to_string_lossy().starts_with(&ours) {
            continue;
        }
        let found = std::process::Command::new("find")
            .arg(entry.path())
            .args(["-name", "settings.json"])
            .output()
            .unwrap();
        if !found.stdout.is_empty() {
            return Err(format!(
                "in the stash: {}",
                String::from_utf8_lossy(&found.stdout)
            ));
        }
    }
    Ok(())
}

fn git_dirs_of_submodules_and_worktrees(_: &Lab) -> Verdict {
    let prepare = |ws: &Path| {
        init(ws);
        bare_repo(&ws.join(".git/modules/sub"), "[core]\n");
        std::fs::create_dir_all(ws.join(".git/modules/sub/hooks")).unwrap();
        std::fs::create_dir_all(ws.join(".git/worktrees/w")).unwrap();
        std::fs::write(ws.join(".git/worktrees/w/commondir"), "../..\n").unwrap();
        std::fs::write(ws.join(".git/worktrees/w/gitdir"), "/nowhere/.git\n").unwrap();
    };
    let l = git_lab(&[], prepare);
    let out = l.sh("echo '[core] fsmonitor = x' >> .git/modules/sub/config; \
         echo x > .git/modules/sub/hooks/post-checkout; echo x > .git/modules/sub/commondir; \
         echo /tmp > .git/worktrees/w/commondir; echo x > .git/worktrees/w/config.worktree; \
         mv .git/modules .git/m2; mv .git/worktrees/w .git/worktrees/w2; echo tried");
    let tool = write(&l, ".git/modules/sub/config", "[core]\n\tfsmonitor = x\n");
    if !tool.text.starts_with("ERROR denied") {
        return Err(format!("write_file .git/modules/sub/config: {}", tool.text));
    }
    unchanged(&l.ws.join(".git/modules/sub/config"), "[core]\n")
        .map_err(|e| format!("{e}: {}", out.text))?;
    unchanged(&l.ws.join(".git/worktrees/w/commondir"), "../..\n")?;
    for p in [
        ".git/modules/sub/hooks/post-checkout",
        ".git/modules/sub/commondir",
        ".git/worktrees/w/config.worktree",
        ".git/m2",
        ".git/worktrees/w2",
    ] {
        absent(&l.ws.join(p)).map_err(|e| format!("{e}: {}", out.text))?;
    }
    Ok(())
}

fn git_still_works_inside(_: &Lab) -> Verdict {
    // Not an attack: the protection leaves git usable in a repository the
    // user made (add, commit, checkout -b, stash, log).
    let l = git_lab(&[], |ws| {
        init(ws);
        std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    });
    let out = l.sh(
        "set -e; export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@b GIT_COMMITTER_NAME=a \
         GIT_COMMITTER_EMAIL=a@b; git add a.txt; git commit -q -m one; git checkout -q -b topic; \
         echo two >> a.txt; git stash -q; git stash pop -q; git commit -q -am two; \
         git log --oneline | wc -l; git status --short; echo git-ok",
    );
    if !out.text.contains("git-ok") || !out.text.contains("\n2\n") {
        return Err(format!("git inside the sandbox failed: {}", out.text));
    }
    let log = host_git(&l.ws, &["log", "--oneline", "topic"]);
    if String::from_utf8_lossy(&log.stdout).lines().count() != 2 {
        return Err(format!("the host does not see the commits: {log:?}"));
    }
    // Nothing of the reservations is left in the repository.
    for p in [".git/commondir", ".git/config.worktree", ".git/gitdir"] {
        absent(&l.ws.join(p))?;
    }
    Ok(())
}

// ------------------------------------------------ bounds per sandbox

const MIB: u64 = 1024 * 1024;

/// Waits (bounded) until the command has written `path`; its content.
fn written(path: &Path) -> Result<String, String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && !text.is_empty()
        {
            return Ok(text);
        }
        if Instant::now() > deadline {
            return Err(format!("{} was never written", path.display()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Stops the lab's processes named `names` (their verdicts stand apart).
fn stop_all(l: &Lab, names: &[String]) {
    for name in names {
        l.tools.call("stop_process", json!({ "name": name }));
    }
}

/// Starts `command` in the background as `name`.
fn background(l: &Lab, name: &str, command: &str) -> Verdict {
    let out = l
        .tools
        .call("start_process", json!({"name": name, "command": command}));
    if out.is_error {
        return Err(out.text);
    }
    Ok(())
}

fn processes_across_commands(l: &Lab) -> Verdict {
    // Each command alone stays well within the budget; together they ask
    // for half as much again.
    const EACH: u64 = 160;
    const COMMANDS: u64 = 4;
    const _: () = assert!(EACH < TEST_PROCESSES && 2 * EACH * COMMANDS > 3 * TEST_PROCESSES);
    let m = marker("procs");
    let names: Vec<String> = (0..COMMANDS).map(|i| format!("forker{i}")).collect();
    let mut verdict = Ok(());
    let mut got = Vec::new();
    for (i, name) in names.iter().enumerate() {
        // A start refused once the budget is spent is contained too.
        let code = format!(
            "import os, time\nn = 0\nfor _ in range({EACH}):\n  try:\n    pid = os.fork()\n  except OSError:\n    break\n  if pid == 0:\n    os.execv(\"/bin/sleep\", [\"{m}\", \"60\"])\n  n += 1\nopen(\"forked{i}\", \"w\").write(str(n))\ntime.sleep(60)"
        );
        match background(l, name, &py(&code)) {
            Ok(()) => match written(&l.ws.join(format!("forked{i}"))) {
                Ok(n) => got.push(n.trim().parse::<u64>().unwrap_or(0)),
                Err(e) => verdict = verdict.and(Err(e)),
            },
            Err(e) if i > 0 && e.contains("limits.sandbox.processes") => break,
            Err(e) => verdict = verdict.and(Err(e)),
        }
    }
    let held = processes_with(&m).len() as u64;
    stop_all(l, &names);
    verdict?;
    // Control: the first command had all it asked for (the budget is not
    // simply smaller per command).
    if got.first() != Some(&EACH) {
        return Err(format!("the first command forked {got:?} of {EACH}"));
    }
    none_left(&m)?;
    if held > TEST_PROCESSES {
        return Err(format!(
            "{held} processes held at once against processes = {TEST_PROCESSES} (per command: {got:?})"
        ));
    }
    Ok(())
}

/// Held while a test measures the host's `Shmem`: an exclusive lock on a
/// file every user running the suite can open.
fn shmem_lock() -> std::fs::File {
    let path = Path::new(LAB_BASE).join("cubby-escape-shmem.lock");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .unwrap();
    let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666));
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive).unwrap();
    file
}

/// The host's `Shmem` (tmpfs and shared memory), in bytes.
fn host_shmem() -> u64 {
    let info = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kib: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("Shmem:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib * 1024
}

fn fill_tmp_and_dev_shm(l: &Lab) -> Verdict {
    let _ = l;
    let tight = lab_with(|_, l, _| l.sandbox.tmp_mb = TEST_TMP_MB);
    let m = marker("filler");
    // Files smaller than RLIMIT_FSIZE, together half as much again as
    // tmp_mb in each; the same into the workspace as the control.
    const FILES: u64 = 4;
    const FILE_MB: u64 = TEST_TMP_MB * 3 / 2 / FILES;
    const _: () = assert!(FILE_MB < TEST_FILE_SIZE_MB);
    let script = format!(
        "for d in /tmp /dev/shm .; do for i in $(seq {FILES}); do head -c {FILE_MB}M /dev/zero > $d/fill$i 2>> errors; done; done; \
         echo > filled; exec -a {m} sleep 60"
    );
    background(&tight, "filler", &script)?;
    let filled = written(&tight.ws.join("filled"));
    let pid = processes_with(&m)
        .first()
        .and_then(|p| p.split(':').next().map(str::to_string));
    let mut used = Vec::new();
    for dir in ["tmp", "dev/shm"] {
        if let Some(pid) = &pid
            && let Ok(st) = rustix::fs::statvfs(format!("/proc/{pid}/root/{dir}").as_str())
        {
            used.push((
                dir,
                (st.f_blocks - st.f_bfree) * st.f_frsize,
                st.f_blocks * st.f_frsize,
            ));
        }
    }
    stop_all(&tight, &["filler".to_string()]);
    filled?;
    let errors = std::fs::read_to_string(tight.ws.join("errors")).unwrap_or_default();
    // Control: the workspace took it all.
    let in_workspace: u64 = (1..=FILES)
        .map(|i| std::fs::metadata(tight.ws.join(format!("fill{i}"))).map_or(0, |m| m.len()))
        .sum();
    if in_workspace != FILES * FILE_MB * MIB {
        return Err(format!(
            "control: the workspace took {in_workspace} bytes; {errors}"
        ));
    }
    if used.len() != 2 {
        return Err(format!(
            "the sandbox's /tmp and /dev/shm not seen from the host ({pid:?})"
        ));
    }
    for (dir, used, size) in used {
        if used > TEST_TMP_MB * MIB || size > TEST_TMP_MB * MIB {
            return Err(format!(
                "/{dir} holds {used} of {size} bytes against tmp_mb = {TEST_TMP_MB}"
            ));
        }
    }
    if !errors.contains("No space left on device") {
        return Err(format!("no ENOSPC: {errors}"));
    }
    drop(tight);
    // What a sandbox's tmpfs held is the host's again once it ends. The
    // host's Shmem is the measure: one suite at a time takes it (the
    // suites of both users run at once, in the same order).
    let _alone = shmem_lock();
    const ROOMY_MB: u64 = 128;
    const FILL_MB: u64 = 112;
    let baseline = host_shmem();
    let roomy = lab_with(|_, l, _| l.sandbox.tmp_mb = ROOMY_MB);
    let chunks = FILL_MB / (TEST_FILE_SIZE_MB / 2);
    let out = roomy.sh(&format!(
        "for d in /tmp /dev/shm; do for i in $(seq {chunks}); do head -c {}M /dev/zero > $d/f$i || exit 1; done; done; echo FILLED",
        TEST_FILE_SIZE_MB / 2
    ));
    let held = host_shmem().saturating_sub(baseline);
    // Control: the memory is the host's while the sandbox lives.
    if !out.text.contains("FILLED") || held < FILL_MB * MIB {
        return Err(format!(
            "control: the host's Shmem rose {held} bytes: {}",
            out.text
        ));
    }
    let full = host_shmem();
    drop(roomy);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = host_shmem();
        if full.saturating_sub(now) >= FILL_MB * MIB {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the sandbox ended, the host's Shmem is still {now} (full: {full}, before: {baseline})"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs a python program on the host, as the user running the suite;
/// what it prints.
fn host_py(code: &str) -> String {
    let out = std::process::Command::new("/usr/bin/python3")
        .args(["-c", code])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Python: `hoard(open)` opens until the kernel refuses and returns how
/// many it got (kept open until the program ends).
const HOARD_PY: &str = "import ctypes, fcntl, os, sys, time\nlibc = ctypes.CDLL(None, use_errno=True)\ndef hoard(open):\n  fds = []\n  while True:\n    fd = open()\n    if fd < 0:\n      return len(fds)\n    fds.append(fd)\ninotify = lambda: libc.inotify_init1(0)\nfanotify = lambda: libc.fanotify_init(0x200, 0)\n";

fn hoard_inotify_and_fanotify(l: &Lab) -> Verdict {
    // Control: outside any sandbox, this user can be left with none (for
    // a moment: the program ends at once).
    let host = host_py(&format!(
        "{HOARD_PY}i = hoard(inotify)\nf = hoard(fanotify)\nprint(i, f, inotify(), fanotify())"
    ));
    let host: Vec<i64> = host
        .split_whitespace()
        .filter_map(|n| n.parse().ok())
        .collect();
    if host.len() != 4 || host[0] < 2 || host[1] < 2 || host[2] >= 0 || host[3] >= 0 {
        return Err(format!("control: on the host {host:?}"));
    }
    let code = format!(
        "{HOARD_PY}i = hoard(inotify)\nf = hoard(fanotify)\nopen(\"hoarded\", \"w\").write(f\"{{i}} {{f}}\")\ntime.sleep(60)"
    );
    background(l, "hoarder", &py(&code))?;
    let hoarded = written(&l.ws.join("hoarded"));
    // While it holds all it could get, the host's user gets more.
    let after = host_py(&format!("{HOARD_PY}print(inotify() >= 0, fanotify() >= 0)"));
    stop_all(l, &["hoarder".to_string()]);
    let hoarded = hoarded?;
    if after.trim() != "True True" {
        return Err(format!(
            "the host's user got no new instance ({after:?}) while the sandbox held {hoarded} \
             (inotify, fanotify; the host alone: {host:?})"
        ));
    }
    Ok(())
}

/// Python: System V shared memory through libc. `make(mb)` creates a
/// private segment (its id, or -1), `fill(i, mb)` attaches it and writes
/// every page (the address, or None), `ids()` lists the segments the IPC
/// namespace holds.
const SHM_PY: &str = "import ctypes, sys\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]\nlibc.shmat.restype = ctypes.c_void_p\nlibc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]\nlibc.shmdt.argtypes = [ctypes.c_void_p]\nlibc.shmctl.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]\nMIB = 1 << 20\ndef make(mb):\n  return libc.shmget(0, mb * MIB, 0o1600)\ndef fill(i, mb):\n  a = libc.shmat(i, None, 0)\n  if a is None or a == ctypes.c_void_p(-1).value:\n    return None\n  ctypes.memset(a, 1, mb * MIB)\n  return a\ndef ids():\n  return [l.split()[1] for l in open(\"/proc/sysvipc/shm\").readlines()[1:]]\n";

/// Size of each System V segment the attack makes, in MiB.
const SHM_SEGMENT_MB: u64 = 4;

fn system_v_shared_memory_left_behind(l: &Lab) -> Verdict {
    let _ = l;
    // Control: on the host a segment outlives the process that made it
    // (one written and detached, one never attached), and one larger than
    // tmp_mb can be made; the control removes what it made.
    let host = host_py(&format!(
        "{SHM_PY}a = make({SHM_SEGMENT_MB})\nlibc.shmdt(fill(a, {SHM_SEGMENT_MB}))\nb = make({SHM_SEGMENT_MB})\nbig = make({})\nprint(a, b, big)",
        2 * TEST_TMP_MB
    ));
    let made: Vec<i64> = host
        .split_whitespace()
        .filter_map(|n| n.parse().ok())
        .collect();
    let kept = host_py(&format!(
        "{SHM_PY}seen = ids()\nmade = {made:?}\nprint(sum(str(i) in seen for i in made))\nfor i in made:\n  libc.shmctl(i, 0, None)"
    ));
    if made.len() != 3 || made.iter().any(|&i| i < 0) || kept.trim() != "3" {
        return Err(format!("control: on the host made {host:?}, kept {kept:?}"));
    }
    let tight = lab_with(|_, l, _| l.sandbox.tmp_mb = TEST_TMP_MB);
    // One command leaves segments behind...
    let out = tight.sh(&py(&format!(
        "{SHM_PY}a = make({SHM_SEGMENT_MB})\nlibc.shmdt(fill(a, {SHM_SEGMENT_MB}))\nb = make({SHM_SEGMENT_MB})\nprint(\"LEFT\", a, b, ids())"
    )));
    if !out.text.contains("LEFT") || out.text.contains("LEFT -1") {
        return Err(format!("the first command made no segment: {}", out.text));
    }
    // ...which the next must not find.
    let next = tight.sh(&py(&format!("{SHM_PY}print(\"SEEN\", ids())")));
    if !next.text.contains("SEEN []") {
        return Err(format!(
            "segments survived their command ({}): {}",
            out.text.trim(),
            next.text
        ));
    }
    // Held at once, segments stop at tmp_mb, and none is larger.
    let bound = tight.sh(&py(&format!(
        "{SHM_PY}big = make({})\nheld = []\nwhile len(held) < 64:\n  i = make({SHM_SEGMENT_MB})\n  if i < 0 or fill(i, {SHM_SEGMENT_MB}) is None:\n    break\n  held.append(i)\nprint(\"BOUND\", big, len(held) * {SHM_SEGMENT_MB})",
        2 * TEST_TMP_MB
    )));
    let got: Vec<i64> = bound
        .text
        .split("BOUND")
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|n| n.parse().ok())
        .collect();
    if got.len() != 2 || got[0] >= 0 || got[1] as u64 > TEST_TMP_MB || got[1] == 0 {
        return Err(format!(
            "System V shared memory against tmp_mb = {TEST_TMP_MB} (a {} MiB segment, MiB held): {}",
            2 * TEST_TMP_MB,
            bound.text
        ));
    }
    // And a command cannot lift the bounds.
    let lift = tight.sh(
        "echo 0 > /proc/sys/kernel/shm_rmid_forced; echo 999999999 > /proc/sys/kernel/shmall; \
         cat /proc/sys/kernel/shm_rmid_forced /proc/sys/kernel/shmall",
    );
    let values: Vec<u64> = lift
        .text
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    if values.len() != 2 || values[0] != 1 || values[1] == 999_999_999 {
        return Err(format!("the IPC limits were lifted: {}", lift.text));
    }
    Ok(())
}

fn lease_on_a_host_file(l: &Lab) -> Verdict {
    let target = l.out("target.txt");
    let take_lease = format!(
        "import fcntl, os, signal, time\nsignal.signal(signal.SIGIO, signal.SIG_IGN)\nf = open(\"{}\")\ntry:\n  fcntl.fcntl(f, fcntl.F_SETLEASE, fcntl.F_RDLCK)\n  r = \"LEASED\"\nexcept OSError as e:\n  r = \"refused %d\" % e.errno\n",
        target.display()
    );
    let writer = format!(
        "import os\ntry:\n  os.close(os.open(\"{}\", os.O_WRONLY | os.O_NONBLOCK))\n  print(\"opened\")\nexcept OSError as e:\n  print(\"failed\", e.errno)\n",
        target.display()
    );
    // Control: a read lease taken outside fails the next writer's open
    // (this one's own, here).
    let control = host_py(&format!("{take_lease}print(r)\n{writer}"));
    if control.split_whitespace().collect::<Vec<_>>() != ["LEASED", "failed", "11"] {
        return Err(format!("control: {control}"));
    }
    let code = format!("{take_lease}open(\"leased\", \"w\").write(r)\ntime.sleep(60)");
    background(l, "leaser", &py(&code))?;
    let leased = written(&l.ws.join("leased"));
    let host_writer = host_py(&writer);
    stop_all(l, &["leaser".to_string()]);
    let leased = leased?;
    if leased.contains("LEASED") || host_writer.trim() != "opened" {
        return Err(format!("{leased}; the host's writer: {host_writer}"));
    }
    Ok(())
}

type Attack = fn(&Lab) -> Verdict;

const ATTACKS: &[(&str, Attack)] = &[
    (
        "write an absolute path outside the root",
        write_absolute_path,
    ),
    ("write through ..", write_dotdot),
    (
        "write through a symlink made inside",
        write_through_symlink_made_inside,
    ),
    (
        "write through /proc/self/root",
        write_through_proc_self_root,
    ),
    ("write through /proc/<pid>/cwd", write_through_proc_pid_cwd),
    (
        "write through a hard link to an outside file",
        write_through_hard_link,
    ),
    (
        "rename an outside file into the root",
        rename_outside_file_in,
    ),
    ("chmod an outside file", chmod_outside_file),
    (
        "change times, owner, mode and xattrs outside the root",
        metadata_outside,
    ),
    (
        "leave a set-user-ID program in the workspace",
        setid_program_left_in_the_workspace,
    ),
    (
        "report its own exit through an inherited descriptor",
        fake_exit_report,
    ),
    (
        "change the mode of what its stdin and stdout lead to",
        metadata_of_its_stdio,
    ),
    ("write /etc and /usr", write_system_directory),
    ("write the host's /tmp and /dev/shm", write_host_tmp),
    ("read the host's /tmp", read_host_tmp),
    (
        "write a sibling sharing the root's prefix",
        writable_root_boundary,
    ),
    (
        "write, truncate, delete existing protected paths",
        protected_existing,
    ),
    ("rename protected directories away", protected_renamed_away),
    (
        "create missing protected paths (git init)",
        protected_missing_created,
    ),
    (
        "create missing protected paths after a command sharing them ends",
        protected_missing_after_a_sharing_command_ends,
    ),
    (
        "write through a protected path that is a symlink",
        protected_path_made_a_symlink,
    ),
    ("read a deny_read file", deny_read_file),
    (
        "read what is typed into a host terminal",
        read_host_terminal,
    ),
    ("open the host's devices", open_host_devices),
    (
        "read a nested deny_read file after renaming a directory above it",
        deny_read_parent_renamed,
    ),
    (
        "read a deny_read file through a symlinked parent",
        deny_read_through_a_symlinked_parent,
    ),
    ("write in read-only mode", read_only_mode),
    (
        "read the credential stores of a home, made before and after the start",
        credential_stores_in_a_home,
    ),
    (
        "read a credential store rewritten on the host",
        credential_store_replaced_on_the_host,
    ),
    (
        "read /etc/shadow, sudoers, SSH host keys and ~/ stores",
        host_secrets,
    ),
    (
        "read deny_read files the host made after the start",
        deny_read_created_after_start,
    ),
    ("read the home with read_scope = system", read_scope_system),
    ("TCP to a host loopback server", tcp_to_host_loopback),
    ("UDP to a host loopback socket", udp_to_host_loopback),
    ("DNS lookup", dns_lookup),
    (
        "raw, packet, IPv6 and netlink sockets",
        raw_and_packet_sockets,
    ),
    (
        "connect to a host abstract unix socket",
        abstract_unix_socket_of_host,
    ),
    ("ptrace a sibling", ptrace_sibling),
    ("signal a host process", signal_host_process),
    ("see host processes in /proc", proc_view_of_host),
    (
        "read the pid-1 init's memory and environment",
        read_the_inits_memory,
    ),
    ("mount and umount", mount_inside),
    ("unshare -U to regain capabilities", unshare_user_namespace),
    ("gain privileges through a setuid binary", setuid_binary),
    ("io_uring_setup", io_uring_setup),
    (
        "bpf, perf_event_open, keyctl, userfaultfd, open_by_handle_at, kexec, modules",
        kernel_interfaces,
    ),
    ("fork bomb", fork_bomb),
    ("memory bomb", memory_bomb),
    ("fill the disk past the file-size limit", disk_filler),
    (
        "a daemon that outlives its command",
        daemon_outlives_command,
    ),
    ("a command that ignores SIGTERM", ignores_sigterm),
    ("change the host name", hostname_and_ipc),
    // git's executable surface (issue 13)
    (
        "the tools make a .git gitfile to a repository of theirs",
        gitfile_made_by_the_tools,
    ),
    (
        "a new or existing .git with a commondir of theirs",
        new_git_dir_with_commondir,
    ),
    ("a worktree's gitfile rewritten", worktree_gitfile_rewritten),
    (
        "make the workspace root a bare repository",
        workspace_root_made_a_bare_repository,
    ),
    (
        "hooks in a core.hooksPath inside the tree",
        hooks_path_in_the_tree,
    ),
    (
        "replace the config by renaming its parent",
        protected_config_parent_renamed,
    ),
    (
        "write through a reservation into the stash",
        placeholder_contamination,
    ),
    (
        "configs and hooks of submodules and worktrees",
        git_dirs_of_submodules_and_worktrees,
    ),
    (
        "git add, commit, checkout -b, stash still work (control)",
        git_still_works_inside,
    ),
    (
        "hold more processes than the sandbox's budget across commands",
        processes_across_commands,
    ),
    (
        "fill /tmp and /dev/shm past tmp_mb, and keep the memory",
        fill_tmp_and_dev_shm,
    ),
    (
        "hold every inotify and fanotify instance of the user",
        hoard_inotify_and_fanotify,
    ),
    ("take a lease on a host file", lease_on_a_host_file),
    (
        "leave System V shared memory behind a command, past tmp_mb",
        system_v_shared_memory_left_behind,
    ),
    // issue 13's performance work: one bind per mask, no remount
    (
        "chmod and write a credential store's mask",
        credential_masks_made_writable,
    ),
];

/// Runs every attack in a fresh lab; panics listing every escape.
fn run_suite(who: &str) {
    assert!(ATTACKS.len() >= MIN_ATTACKS);
    // Controls: the sandbox does run commands, which may write inside, and
    // a marked process is seen from the host while it lives (so that the
    // "nothing left" checks are not vacuous).
    let control = lab();
    let m = marker("control");
    let out = control.sh(&format!(
        "echo inside > inside.txt && id -u && (bash -c 'exec -a {m} sleep 2' &) && sleep 0.5 && echo started"
    ));
    assert_eq!(
        std::fs::read_to_string(control.ws.join("inside.txt")).unwrap(),
        "inside\n",
        "[{who}] control: {}",
        out.text
    );
    let uid = rustix::process::getuid().as_raw();
    assert!(
        out.text.contains(&format!("\n{uid}\n")),
        "[{who}] control: {}",
        out.text
    );
    let out = control.tools.call(
        "start_process",
        json!({"name": "control", "command": format!("exec -a {m} sleep 30")}),
    );
    assert!(!out.is_error, "{}", out.text);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        processes_with(&m).len(),
        1,
        "[{who}] control process not seen"
    );
    drop(control);
    none_left(&m).unwrap();
    let mut escapes = Vec::new();
    for (name, attack) in ATTACKS {
        let lab = lab();
        let started = Instant::now();
        let verdict = attack(&lab);
        eprintln!(
            "[{who}] {:<9} {name} ({} ms)",
            if verdict.is_ok() {
                "contained"
            } else {
                "ESCAPED"
            },
            started.elapsed().as_millis()
        );
        if let Err(detail) = verdict {
            escapes.push(format!("{name}: {detail}"));
        }
    }
    assert!(
        escapes.is_empty(),
        "[{who}] {} of {} attacks escaped:\n{}",
        escapes.len(),
        ATTACKS.len(),
        escapes.join("\n")
    );
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

#[test]
fn escape_suite_as_invoking_user() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    if !is_root() {
        eprintln!("note: not root; the suite runs as the invoking (unprivileged) user");
    }
    run_suite(if is_root() { "root" } else { "invoking user" });
}

/// Creates `cubby-escape` if needed and returns its uid and gid.
fn escape_user() -> (u32, u32) {
    let lookup = || {
        std::fs::read_to_string("/etc/passwd")
            .unwrap()
            .lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.first() == Some(&ESCAPE_USER))
                    .then(|| (f[2].parse().unwrap(), f[3].parse().unwrap()))
            })
    };
    if let Some(ids) = lookup() {
        return ids;
    }
    let status = std::process::Command::new("useradd")
        .args([
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
        ])
        .arg(ESCAPE_USER)
        .status()
        .unwrap();
    assert!(status.success() || lookup().is_some(), "useradd failed");
    lookup().unwrap()
}

#[test]
fn escape_suite_as_unprivileged_user() {
    if std::env::var_os(CHILD_ENV).is_some() || !is_root() {
        run_suite("unprivileged");
        return;
    }
    use std::os::unix::process::CommandExt;
    let (uid, gid) = escape_user();
    // Copy this test binary where the unprivileged user can execute it.
    let dir = tempfile::Builder::new()
        .prefix("cubby-escape-bin-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.path().join("escape");
    std::fs::copy(std::env::current_exe().unwrap(), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    // A home of its own, beneath /home (the read attacks plant credential
    // stores there).
    let home = PathBuf::from(format!("/home/cubby-escape-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(uid), Some(gid)).unwrap();
    struct Remove(PathBuf);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _home = Remove(home.clone());
    let mut child = std::process::Command::new(&bin)
        .args([
            "--exact",
            "escape_suite_as_unprivileged_user",
            "--test-threads=1",
            "--nocapture",
        ])
        .env_clear()
        .env(CHILD_ENV, "1")
        .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
        .env("HOME", &home)
        .env("TMPDIR", "/tmp")
        .current_dir("/tmp")
        .uid(uid)
        .gid(gid)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = String::new();
    let mut stderr = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    eprintln!("{stderr}");
    assert!(
        status.success() && stdout.contains("1 passed"),
        "the suite as {ESCAPE_USER} (uid {uid}) failed:\n{stdout}\n{stderr}"
    );
}
