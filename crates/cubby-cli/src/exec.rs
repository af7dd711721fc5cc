//! `cubby exec` (one command in the sandbox, stdio and exit code passed
//! through) and `cubby doctor` (what isolation this machine offers).

use std::os::unix::process::ExitStatusExt;
use std::process::ExitCode;

use anyhow::bail;
use cubby::sandbox::env::{NON_INTERACTIVE_ENV, Source};
use cubby::sandbox::{Capabilities, CommandEnv, ExecSpec};
use cubby::{HostEnv, Mode, NetworkMode, ProviderKind, WorkspacePath};

use crate::Common;
use crate::setup;

/// Exit code when the command could not be started at all.
const EXIT_NOT_STARTED: u8 = 125;

/// Runs `command` under the policy; returns its exit code (128 + the
/// signal when it was killed by one).
pub fn run(
    common: &Common,
    network: Option<&str>,
    command: Vec<String>,
) -> anyhow::Result<ExitCode> {
    let mut setup = setup::resolve(common)?;
    let network = match network {
        None => None,
        Some("off") => Some(NetworkMode::Off),
        Some("on") => Some(NetworkMode::On),
        Some("allow") => Some(NetworkMode::Allow),
        Some(other) => bail!("--network: expected `off`, `allow` or `on`, got `{other}`"),
    };
    let cwd = std::env::current_dir()
        .ok()
        .and_then(|d| d.strip_prefix(setup.root()).ok().map(|p| p.to_path_buf()))
        .and_then(|p| WorkspacePath::parse(&p.to_string_lossy()).ok())
        .unwrap_or_else(WorkspacePath::root);
    // The one environment of commands (SPEC §4); `cubby exec` is
    // interactive, so without the fixed variables of `run`.
    let env = setup::command_env(&setup)?.build(setup.host_env().vars(), false);
    if let Some(network) = network {
        setup.set_command_network(network);
    }
    let status = match setup.provider() {
        ProviderKind::Linux => {
            let sandbox = setup
                .open_linux()
                .map_err(|e| anyhow::anyhow!("{}", e.message()))?;
            let spec = ExecSpec {
                argv: command,
                cwd,
                env,
                stdin: true,
            };
            let mut child = match sandbox.spawn_inherited(&spec) {
                Ok(child) => child,
                Err(e) => {
                    eprintln!("cubby: {}", e.message());
                    return Ok(ExitCode::from(EXIT_NOT_STARTED));
                }
            };
            let status = child.wait()?;
            // The command's reservations (placeholders at missing protected
            // paths) go with it; the sandbox itself is not torn down: waiting
            // for the holder to exit would only delay our own exit, and it
            // ends by itself when this process closes its socket.
            drop(child);
            std::mem::forget(sandbox);
            status
        }
        ProviderKind::Local => {
            tracing::warn!("provider `local`: the command runs unconfined, as your user");
            let Some((program, args)) = command.split_first() else {
                bail!("no command given");
            };
            std::process::Command::new(program)
                .args(args)
                .env_clear()
                .envs(env)
                .current_dir(setup.root().join(cwd.as_path()))
                .status()?
        }
        other => bail!(
            "the {} provider runs no commands; use --provider linux",
            other.as_str()
        ),
    };
    let code = match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        _ => 1,
    };
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}

/// Prints each capability and what cubby will do with it; exit 1 when the
/// `linux` provider cannot start here.
pub fn doctor(common: &Common) -> anyhow::Result<ExitCode> {
    let caps = Capabilities::probe();
    let yes_no = |r: &Result<(), String>| match r {
        Ok(()) => "yes".to_string(),
        Err(e) => format!("no ({e})"),
    };
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    println!("kernel:           {}", kernel.trim());
    match caps.landlock_abi {
        Some(v) => println!("landlock:         yes, ABI {v}"),
        None => println!("landlock:         no"),
    }
    println!("user namespaces:  {}", yes_no(&caps.user_namespaces));
    println!("seccomp filters:  {}", yes_no(&caps.seccomp));
    println!(
        "pid_max per ns:   {}",
        if caps.namespaced_pid_max {
            "yes (the sandbox's pid namespace, where each command's nests, gets pid_max for limits.sandbox.processes)"
        } else {
            "no (kernel before 6.14)"
        }
    );
    match &caps.pids_cgroup {
        Some(dir) => println!(
            "pids cgroup:      yes, {}{}",
            dir.display(),
            if caps.namespaced_pid_max {
                " (not needed: pid_max is per namespace)"
            } else {
                " (each sandbox gets pids.max)"
            }
        ),
        None => println!("pids cgroup:      no"),
    }
    println!(
        "running as root:  {}",
        if !caps.root {
            "no (RLIMIT_NPROC also bounds processes)"
        } else if caps.namespaced_pid_max || caps.pids_cgroup.is_some() {
            "yes (RLIMIT_NPROC does not bind root; the above bounds a fork bomb)"
        } else {
            "yes (RLIMIT_NPROC does not bind root and nothing else bounds a fork bomb here)"
        }
    );
    let missing = caps.missing();
    let setup = setup::resolve(common);
    let mode = setup
        .as_ref()
        .map(|s| s.policy().mode())
        .unwrap_or_default();
    let env_ok = match setup.as_ref().map_err(|e| format!("{e:#}")).and_then(|s| {
        setup::command_env(s)
            .map(|env| (env, s.host_env().clone()))
            .map_err(|e| format!("{e:#}"))
    }) {
        Ok((env, host)) => {
            print_command_env(&env, &host);
            true
        }
        Err(e) => {
            println!("command env:      unknown: {e}");
            false
        }
    };
    if missing.is_empty() {
        println!(
            "cubby will:       run commands (provider linux, mode {}) in user, mount, pid, IPC, UTS \
             and network namespaces, under Landlock, seccomp and rlimits{}",
            mode.as_str(),
            if mode == Mode::FullAccess {
                " (full-access: unconfined)"
            } else {
                ""
            }
        );
        Ok(if env_ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        })
    } else {
        println!(
            "cubby will:       refuse to start the linux provider: missing {}. \
             `--provider local` runs commands without OS isolation.",
            missing.join(", ")
        );
        Ok(ExitCode::from(1))
    }
}

/// Prints what commands get of this process's environment and what they do
/// not (SPEC §4): names only, never a value.
fn print_command_env(env: &CommandEnv, host: &HostEnv) {
    let described = env.describe(host.vars(), false);
    let names = |source: Source| -> String {
        let list: Vec<&str> = described
            .iter()
            .filter(|(_, s)| *s == source)
            // What run fixes has its own line.
            .filter(|(n, _)| {
                source != Source::NotPassed || !NON_INTERACTIVE_ENV.iter().any(|(k, _)| k == n)
            })
            .map(|(n, _)| n.as_str())
            .collect();
        if list.is_empty() {
            "none".to_string()
        } else {
            list.join(", ")
        }
    };
    println!("command env:      commands get only these variables (names; values are never shown)");
    println!("  inherited:      {}", names(Source::Inherited));
    println!("  env.pass:       {}", names(Source::Pass));
    println!("  env.set:        {}", names(Source::Set));
    println!(
        "  secrets:        {} (redacted from every output)",
        names(Source::Secret)
    );
    let unset: Vec<&str> = env
        .pass()
        .iter()
        .filter(|p| host.var_os(p.as_str()).is_none())
        .map(String::as_str)
        .collect();
    if !unset.is_empty() {
        println!(
            "  env.pass unset: {} (not in cubby's environment)",
            unset.join(", ")
        );
    }
    let fixed: Vec<&str> = NON_INTERACTIVE_ENV.iter().map(|(k, _)| *k).collect();
    println!(
        "  run fixes:      {} (run and start_process; not cubby exec)",
        fixed.join(", ")
    );
    println!(
        "not given:        {} (add a name to `[env] pass`, or to `secrets` if it is a credential)",
        names(Source::NotPassed)
    );
    println!(
        "withheld:         {} (cubby's own; never given to commands)",
        names(Source::Withheld)
    );
}
