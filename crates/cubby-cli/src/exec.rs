//! `cubby exec` (one command in the sandbox, stdio and exit code passed
//! through) and `cubby doctor` (what isolation this machine offers), both
//! through the provider-neutral `Sandbox` trait and probe.

use std::process::ExitCode;

use anyhow::bail;
use cubby::sandbox::env::{NON_INTERACTIVE_ENV, Source};
use cubby::sandbox::{CommandEnv, ExecSpec, ExitStatus};
use cubby::{ErrorKind, HostEnv, Mode, NetworkMode, ProviderKind, WorkspacePath};

use crate::Common;
use crate::setup;

/// Exit code when cubby could not run the command (the sandbox did not
/// start), as `env`, `docker run` and `timeout` use it.
const EXIT_NOT_STARTED: u8 = 125;
/// Exit code when the program is there but cannot be executed (as a shell
/// reports it).
const EXIT_NOT_EXECUTABLE: u8 = 126;
/// Exit code when there is no such program (as a shell reports it).
const EXIT_NOT_FOUND: u8 = 127;
/// Added to a signal's number for the exit code of a command it killed
/// (as shells report it).
const EXIT_SIGNAL_BASE: i32 = 128;

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
    let mut env = setup::command_env(&setup)?;
    if let Some(network) = network {
        setup.set_command_network(network);
    }
    let sandbox = setup
        .open_sandbox()
        .map_err(|e| anyhow::anyhow!("{}", e.message()))?;
    if !sandbox.supports_commands() {
        bail!(
            "the {} provider runs no commands; use --provider linux",
            sandbox.kind().as_str()
        );
    }
    // Where the command reads the skills, as `run` gives it.
    let skills =
        cubby::skills::discover(sandbox.fs(), setup.policy().skills_dirs(), setup.policy());
    if let Some(dir) = skills.dirs.first().and_then(|d| sandbox.command_path(d)) {
        env.cubby_var(cubby::skills::SKILLS_DIR_ENV, dir.into_os_string());
    }
    // The sandbox's gateways take this command's token, as they take a
    // `run`'s: held until the command ends, dead after.
    let gateway_run = match sandbox.gateway_run() {
        Ok(run) => run,
        Err(e) => {
            eprintln!("cubby: {}", e.message());
            return Ok(ExitCode::from(EXIT_NOT_STARTED));
        }
    };
    if let Some(run) = &gateway_run {
        env.cubby_var(cubby::GATEWAY_TOKEN_ENV, run.token().into());
    }
    let env = env.build(setup.host_env().vars(), false);
    let spec = ExecSpec {
        argv: command,
        cwd,
        env,
        stdin: true,
        output_dir: None,
    };
    let child = match sandbox.exec_attached(&spec) {
        Ok(child) => child,
        Err(e) => {
            eprintln!("cubby: {}", e.message());
            // The kinds every provider gives a program that did not start
            // (`Sandbox::exec_attached`).
            return Ok(ExitCode::from(match e.kind() {
                ErrorKind::NotFound => EXIT_NOT_FOUND,
                ErrorKind::Denied => EXIT_NOT_EXECUTABLE,
                _ => EXIT_NOT_STARTED,
            }));
        }
    };
    let status = child.wait();
    // What the command held (placeholders at missing protected paths) goes
    // with it; the sandbox itself is not torn down: waiting for it to end
    // (the `linux` provider's holder) would only delay our own exit, and it
    // ends by itself when this process exits.
    drop(child);
    drop(gateway_run);
    std::mem::forget(sandbox);
    let code = match status {
        ExitStatus::Exited(c) => c,
        ExitStatus::Signaled(sig) => EXIT_SIGNAL_BASE + sig,
        ExitStatus::Lost(reason) => bail!("{reason}"),
    };
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}

/// Prints what this machine offers the provider asked for (the `linux`
/// provider when the config cannot be read) and what cubby will do with
/// it; exit 1 when the provider cannot start here or the config is wrong.
pub fn doctor(common: &Common, accept_upstream: &[String]) -> anyhow::Result<ExitCode> {
    let setup = setup::resolve(common);
    if let Ok(workspace) = &setup {
        for label in accept_upstream {
            if !workspace.config().upstream.contains_key(label) {
                anyhow::bail!(
                    "--accept-upstream {label}: there is no `[upstream.{label}]` in the config"
                );
            }
            let accepted = workspace
                .upstream_pins()
                .accept(label)
                .map_err(|e| anyhow::anyhow!("{}", e.message()))?;
            println!(
                "upstream {label}:   accepted the definitions of {}",
                if accepted.is_empty() {
                    "no tool (nothing was pending)".to_string()
                } else {
                    accepted.join(", ")
                }
            );
        }
    }
    let provider = setup
        .as_ref()
        .map(|s| s.provider())
        .unwrap_or(ProviderKind::Linux);
    let probe = cubby::sandbox::probe(provider);
    for (label, value) in &probe.facts {
        println!("{:<LABEL_WIDTH$}{value}", format!("{label}:"));
    }
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
    let skills_ok = match &setup {
        Ok(s) => print_skills(s),
        Err(_) => true,
    };
    if let Ok(s) = &setup {
        print_gateways(s.policy(), s.host_env());
    }
    let upstream_ok = match &setup {
        Ok(s) => print_upstreams(s),
        Err(_) => true,
    };
    let kind = probe.kind.as_str();
    if !probe.ready() {
        println!(
            "cubby will:       refuse to start the {kind} provider: missing {}. {}",
            probe.missing.join(", "),
            probe.instead
        );
        return Ok(ExitCode::from(1));
    }
    match &probe.commands {
        Some(how) => println!(
            "cubby will:       run commands (provider {kind}, mode {}) {how}{}",
            mode.as_str(),
            if mode == Mode::FullAccess {
                " (full-access: unconfined)"
            } else {
                ""
            }
        ),
        None => println!(
            "cubby will:       run no commands (provider {kind}, mode {}): the file tools only",
            mode.as_str()
        ),
    }
    Ok(if env_ok && skills_ok && upstream_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Prints the sandbox's gateways: where each forwards, its routes, and
/// its credential's variable by name (set or not; never its value).
fn print_gateways(policy: &cubby::Policy, host: &HostEnv) {
    let gateways = policy.gateways();
    if gateways.is_empty() {
        println!("gateways:         none (`[gateway.<name>]` in the config adds one)");
        return;
    }
    println!(
        "gateways:         commands call $CUBBY_GATEWAY_<NAME>_URL with $CUBBY_GATEWAY_TOKEN \
         (run, start_process, cubby exec; provider linux, not in full-access)"
    );
    for (name, gateway) in gateways {
        let credential = match &gateway.credential {
            None => "no credential".to_string(),
            Some(c) if host.non_empty(&c.secret).is_some() => {
                format!("credential ${} as `{}`", c.secret, c.header)
            }
            Some(c) => format!(
                "credential ${} as `{}` NOT SET: requests go without it",
                c.secret, c.header
            ),
        };
        let routes: Vec<&str> = gateway.routes.iter().map(|r| r.text()).collect();
        println!(
            "  {name}: {} ({credential}); routes: {}",
            gateway.base_url,
            routes.join(", ")
        );
    }
}

/// Prints the skills a session of this workspace finds, and the ones it
/// skips with their reasons (read through the confined file system, as a
/// toolset reads them). False when the workspace cannot be read.
fn print_skills(workspace: &cubby::Workspace) -> bool {
    let policy = workspace.policy();
    let dirs: Vec<String> = policy
        .skills_dirs()
        .iter()
        .map(|d| d.display_dir())
        .collect();
    if dirs.is_empty() {
        println!("skills:           none (no `[skills] dirs`)");
        return true;
    }
    let sandbox = match cubby::local_sandbox(workspace.root()) {
        Ok(s) => s,
        Err(e) => {
            println!("skills:           unknown: {}", e.message());
            return false;
        }
    };
    let skills = cubby::skills::discover(sandbox.fs(), policy.skills_dirs(), policy);
    let names: Vec<&str> = skills.names();
    println!(
        "skills:           {} found in {} ({}); read-only for tools and commands{}",
        skills.found.len(),
        dirs.join(", "),
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        },
        skills
            .dirs
            .first()
            .map(
                |d| format!(", commands read them at ${}", cubby::skills::SKILLS_DIR_ENV)
                    + &format!(" = {}", workspace.root().join(d.as_path()).display())
            )
            .unwrap_or_default()
    );
    for skipped in &skills.skipped {
        println!(
            "  skipped:        {}: {}",
            skipped.path,
            cubby::skills::escape_catalog_text(&skipped.reason)
        );
    }
    true
}

/// Width of the label column of `cubby doctor` (`label:` and padding).
const LABEL_WIDTH: usize = 18;

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

/// The upstream servers: each one's tools and pinned definitions, and every
/// change waiting for the operator (its diff, and how to accept it). False
/// when a change is waiting.
fn print_upstreams(workspace: &cubby::Workspace) -> bool {
    let mut ok = true;
    for (label, config) in &workspace.config().upstream {
        let how = match (&config.command, &config.url) {
            (Some(argv), _) => format!("stdio `{}` in a sandbox of its own", argv.join(" ")),
            (_, Some(url)) => format!("HTTP {url} under [network]"),
            _ => String::new(),
        };
        let offered: Vec<&str> = workspace
            .upstream_routes()
            .of(label)
            .map(|r| r.exposed.as_str())
            .collect();
        println!(
            "upstream {label}:   {how}; offers {}",
            if offered.is_empty() {
                "no tool (`tools` is empty)".to_string()
            } else {
                offered.join(", ")
            }
        );
        let pins = match workspace.upstream_pins().load(label) {
            Ok(p) => p,
            Err(e) => {
                println!("  pins: {}", e.message());
                ok = false;
                continue;
            }
        };
        for (tool, seen) in &pins.pending {
            ok = false;
            println!(
                "  `{tool}` changed since it was first listed; hidden until accepted with \
                 `cubby doctor --accept-upstream {label}`:"
            );
            if let Some(pinned) = pins.pinned.get(tool) {
                // An upstream's text: no control character reaches the
                // terminal.
                for line in cubby::upstream::describe_change(pinned, seen).lines() {
                    println!("    {}", cubby::output::neutralize_line(line));
                }
            }
        }
    }
    ok
}
