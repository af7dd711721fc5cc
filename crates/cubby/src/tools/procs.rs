//! Background processes: `start_process`, `process_logs`, `stop_process`,
//! `list_processes`, `write_stdin`, `preview`.
//!
//! # Caveats
//!
//! - Processes belong to the run: when the toolset is dropped (the run
//!   ends), every one still running is killed with its whole tree.
//! - `stop_process` sends `SIGTERM` to the whole tree, then kills it after a
//!   2 s grace.
//! - Logs keep the last [`RETAINED_LOG_BYTES`](crate::process::RETAINED_LOG_BYTES)
//!   (configurable); a cursor older than that resumes at the oldest byte kept.

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::run::{prepare, start};
use super::{Annotations, Ctx, READ_ONLY, Tool, thousands};
use crate::error::{Error, ErrorKind, Result};
use crate::output::ToolOutput;
use crate::process::{Proc, STOP_GRACE, Status};

/// Longest a `start_process` with `port` waits for the port to listen.
pub const PORT_WAIT: Duration = Duration::from_secs(30);
/// Pause between two probes of the port.
const PORT_PROBE_INTERVAL: Duration = Duration::from_millis(25);
/// Bytes returned by one `process_logs` call.
pub const LOG_PAGE_BYTES: usize = 32 * 1024;
/// Longest process name.
pub const MAX_NAME_CHARS: usize = 64;
/// Largest `write_stdin` input.
pub const MAX_STDIN_BYTES: usize = 1024 * 1024;

fn not_found(name: &str) -> Error {
    Error::new(
        ErrorKind::NotFound,
        format!(
            "there is no process named `{}`; list_processes shows the processes of this session",
            crate::output::truncate_for_message(name)
        ),
    )
}

fn find(ctx: &Ctx<'_>, name: &str) -> Result<std::sync::Arc<Proc>> {
    ctx.procs.get(name).ok_or_else(|| not_found(name))
}

fn valid_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.chars().count() <= MAX_NAME_CHARS
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid_input(format!(
            "process name `{}` is not valid; use 1 to {MAX_NAME_CHARS} letters, digits, `-`, `_` or `.`",
            crate::output::truncate_for_message(name)
        )))
    }
}

/// `Err(unsupported)` when the sandbox's commands have a network of their
/// own (`linux` with network `off` or `allow`): a port they listen on is
/// not the host's, so the host can neither wait for it nor reach it, and
/// `127.0.0.1:port` on the host would be whatever the host runs there.
fn ports_reach_the_host(ctx: &Ctx<'_>, port: u16) -> Result<()> {
    // `full-access` runs `linux` commands on the host, its network too.
    let own_network = ctx.sandbox.kind() == crate::config::ProviderKind::Linux
        && ctx.policy.mode() != crate::policy::Mode::FullAccess
        && ctx.policy.command_network() != crate::config::NetworkMode::On;
    if own_network {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "commands run in a network of their own (network is not `on`): port {port} in \
                 the sandbox cannot be reached from the host, and 127.0.0.1:{port} there is the \
                 host's. Reach the server from inside the sandbox instead, e.g. `run` with \
                 `curl -s http://127.0.0.1:{port}/`; without `port`, start_process starts it \
                 all the same"
            ),
        ));
    }
    Ok(())
}

fn listening(port: u16) -> bool {
    let v4 = SocketAddr::from(([127, 0, 0, 1], port));
    let v6 = SocketAddr::from(([0, 0, 0, 0, 0, 0, 0, 1], port));
    [v4, v6]
        .iter()
        .any(|a| TcpStream::connect_timeout(a, Duration::from_millis(100)).is_ok())
}

/// Arguments of `start_process`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartParams {
    /// A name for the process, unique among running processes (letters, digits, `-`, `_`, `.`).
    pub name: String,
    /// Shell command line to run in the background.
    pub command: String,
    /// Working directory relative to the workspace root (default: the root).
    #[serde(default)]
    pub cwd: Option<String>,
    /// TCP port the process will listen on: the call waits until it listens and returns its URL.
    #[serde(default)]
    pub port: Option<u16>,
    /// Give the process a stdin pipe for write_stdin (default false: stdin closed).
    #[serde(default)]
    pub stdin: Option<bool>,
}

/// Result of `start_process`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct StartOutput {
    /// The process name.
    pub name: String,
    /// Its pid.
    pub pid: u32,
    /// The URL it serves, when `port` was given.
    pub url: Option<String>,
    /// `running` or `exited N`.
    pub status: String,
}

/// The `start_process` tool.
pub struct StartProcess;

impl Tool for StartProcess {
    const NAME: &'static str = "start_process";
    const FACTS: super::ToolFacts = super::command(false);
    fn description(d: &super::Describe<'_>) -> String {
        let read = d.mention(ProcessLogs::NAME, |logs| {
            format!(" Read its output with {logs}.")
        });
        let stop = d.mention(StopProcess::NAME, |stop| format!(" Stop it with {stop}."));
        format!(
            "Start a command in the background in the sandboxed workspace (a server, a \
             watcher); use it instead of {} for anything that does not end by itself. With \
             `port`, wait (up to {} s) until it listens and return its URL.{read}{stop}",
            super::run::Run::NAME,
            PORT_WAIT.as_secs(),
        )
    }
    const ANNOTATIONS: Annotations = Annotations {
        read_only: false,
        destructive: true,
        idempotent: false,
        open_world: true,
    };
    type Params = StartParams;
    type Output = StartOutput;

    fn call(ctx: &Ctx<'_>, p: StartParams) -> Result<ToolOutput<StartOutput>> {
        valid_name(&p.name)?;
        if ctx.procs.name_is_live(&p.name) {
            return Err(Error::invalid_input(format!(
                "a process named `{}` is already running; stop it first or pick another name",
                p.name
            )));
        }
        if let Some(port) = p.port {
            ports_reach_the_host(ctx, port)?;
        }
        let (command, cwd) = prepare(ctx, &p.command, p.cwd.as_deref())?;
        // No call subscriber: the process outlives this call.
        let proc = start(
            ctx,
            p.name.clone(),
            &command,
            &cwd,
            p.stdin.unwrap_or(false),
            None,
            None,
        )?;
        let mut url = None;
        if let Some(port) = p.port {
            let deadline = Instant::now() + PORT_WAIT;
            loop {
                if listening(port) {
                    url = Some(format!("http://127.0.0.1:{port}/"));
                    break;
                }
                if proc.status() != Status::Running {
                    let (log, _, _, _) = proc.read_log(0, 2048);
                    return Err(Error::new(
                        ErrorKind::Unsupported,
                        format!(
                            "`{}` {} before listening on port {port}; its output:\n{log}",
                            p.name,
                            proc.status().describe()
                        ),
                    ));
                }
                if Instant::now() >= deadline {
                    return Err(Error::new(
                        ErrorKind::Timeout,
                        format!(
                            "`{}` did not listen on port {port} within {} s; it is still running \
                             (see process_logs, or stop_process)",
                            p.name,
                            PORT_WAIT.as_secs()
                        ),
                    ));
                }
                std::thread::sleep(PORT_PROBE_INTERVAL);
            }
        }
        let status = proc.status().describe();
        let text = match &url {
            Some(u) => format!("Started `{}` (pid {}), listening at {u}", p.name, proc.pid),
            None => format!(
                "Started `{}` (pid {}); read its output with process_logs.",
                p.name, proc.pid
            ),
        };
        Ok(ToolOutput::ok(
            text,
            StartOutput {
                name: p.name,
                pid: proc.pid,
                url,
                status,
            },
        ))
    }
}

/// Arguments of `process_logs`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LogsParams {
    /// Process name (a start_process name, or `run-N` from a run).
    pub name: String,
    /// Byte offset to read from: the `next_cursor` of the previous call (default 0).
    #[serde(default)]
    pub cursor: Option<u64>,
}

/// Result of `process_logs`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct LogsOutput {
    /// The process name.
    pub name: String,
    /// Output from `cursor`.
    pub output: String,
    /// Offset of the first byte returned.
    pub cursor: u64,
    /// Pass this as `cursor` to read on.
    pub next_cursor: u64,
    /// True when more output is already available after `next_cursor`.
    pub more: bool,
    /// Bytes between the requested cursor and the oldest byte kept.
    pub dropped_bytes: u64,
    /// `running` or `exited N`.
    pub status: String,
}

/// The `process_logs` tool.
pub struct ProcessLogs;

impl Tool for ProcessLogs {
    const NAME: &'static str = "process_logs";
    const FACTS: super::ToolFacts = super::command(true);
    fn description(_d: &super::Describe<'_>) -> String {
        format!(
            "Read the output of a process of this session (a background process, or a finished \
             run `run-N`) from a cursor; use it to page output a run cut or to follow a server. \
             Up to {} a call from `cursor` (default 0); returns the next cursor and the status \
             (`running` / `exited N`).",
            super::size(LOG_PAGE_BYTES as u64),
        )
    }
    const ANNOTATIONS: Annotations = READ_ONLY;
    type Params = LogsParams;
    type Output = LogsOutput;

    fn call(ctx: &Ctx<'_>, p: LogsParams) -> Result<ToolOutput<LogsOutput>> {
        let proc = find(ctx, &p.name)?;
        let cursor = p.cursor.unwrap_or(0);
        let (output, from, next, dropped) = proc.read_log(cursor, LOG_PAGE_BYTES);
        let status = proc.status().describe();
        let more = next < proc.output_end();
        let mut text = String::new();
        if dropped > 0 {
            let window = proc.retained_window();
            // A window shrunk to share the run's budget says so.
            let why = if window < ctx.exec.retained_log_bytes {
                let (_, budget) = ctx.procs.retained_log_bytes();
                format!(
                    " (this process keeps its last {} bytes: the session's processes share {} \
                     bytes of output)",
                    thousands(window as u64),
                    thousands(budget as u64)
                )
            } else {
                String::new()
            };
            text.push_str(&format!(
                "[{} bytes before this point are no longer kept{why}]\n",
                thousands(dropped)
            ));
        }
        text.push_str(&output);
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!(
            "[{}: status {status}; next_cursor={next}{}]",
            p.name,
            if more {
                ", more output is available"
            } else {
                ""
            }
        ));
        Ok(ToolOutput::ok(
            text,
            LogsOutput {
                name: p.name,
                output,
                cursor: from,
                next_cursor: next,
                more,
                dropped_bytes: dropped,
                status,
            },
        ))
    }
}

/// Arguments naming one process.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NameParams {
    /// Process name.
    pub name: String,
}

/// Result of `stop_process`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct StopOutput {
    /// The process name.
    pub name: String,
    /// Final status (`exited N` or `killed SIG`).
    pub status: String,
}

/// The `stop_process` tool.
pub struct StopProcess;

impl Tool for StopProcess {
    const NAME: &'static str = "stop_process";
    const FACTS: super::ToolFacts = super::command(false);
    fn description(_d: &super::Describe<'_>) -> String {
        format!(
            "Stop a background process of this session and everything it started; use it when \
             a server or watcher is no longer needed. SIGTERM to the whole tree, SIGKILL after a \
             {} s grace. Returns its exit status.",
            STOP_GRACE.as_secs(),
        )
    }
    const ANNOTATIONS: Annotations = Annotations {
        read_only: false,
        destructive: true,
        idempotent: true,
        open_world: false,
    };
    type Params = NameParams;
    type Output = StopOutput;

    fn call(ctx: &Ctx<'_>, p: NameParams) -> Result<ToolOutput<StopOutput>> {
        let proc = find(ctx, &p.name)?;
        let was_running = proc.status() == Status::Running;
        if was_running {
            proc.stop(STOP_GRACE);
        }
        ctx.procs.retire(&p.name);
        let status = proc.status().describe();
        let text = if was_running {
            format!("Stopped `{}`: {status}.", p.name)
        } else {
            format!("`{}` had already ended: {status}.", p.name)
        };
        Ok(ToolOutput::ok(
            text,
            StopOutput {
                name: p.name,
                status,
            },
        ))
    }
}

/// Arguments of `list_processes` (none).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

/// One process in a listing.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ProcessInfo {
    /// Name.
    pub name: String,
    /// Pid.
    pub pid: u32,
    /// Command line.
    pub command: String,
    /// `running`, `exited N` or `killed SIG`.
    pub status: String,
    /// Milliseconds since it started (until it ended, for finished ones).
    pub uptime_ms: u64,
}

/// Result of `list_processes`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ListOutput {
    /// The processes of this session, by name.
    pub processes: Vec<ProcessInfo>,
}

/// The `list_processes` tool.
pub struct ListProcesses;

impl Tool for ListProcesses {
    const NAME: &'static str = "list_processes";
    const FACTS: super::ToolFacts = super::command(true);
    fn description(d: &super::Describe<'_>) -> String {
        format!(
            "List the processes of this session (background processes and recent runs): name, \
             pid, command, status and uptime; use it to find a process's name{}.",
            match (d.offers(ProcessLogs::NAME), d.offers(StopProcess::NAME)) {
                (true, true) => format!(" for {} or {}", ProcessLogs::NAME, StopProcess::NAME),
                (true, false) => format!(" for {}", ProcessLogs::NAME),
                (false, true) => format!(" for {}", StopProcess::NAME),
                (false, false) => String::new(),
            },
        )
    }
    const ANNOTATIONS: Annotations = READ_ONLY;
    type Params = NoParams;
    type Output = ListOutput;

    fn call(ctx: &Ctx<'_>, _p: NoParams) -> Result<ToolOutput<ListOutput>> {
        let processes: Vec<ProcessInfo> = ctx
            .procs
            .list()
            .into_iter()
            .map(|p| {
                let end = p.ended().unwrap_or_else(Instant::now);
                ProcessInfo {
                    name: p.name.clone(),
                    pid: p.pid,
                    command: p.command.clone(),
                    status: p.status().describe(),
                    uptime_ms: end.duration_since(p.started).as_millis() as u64,
                }
            })
            .collect();
        let text = if processes.is_empty() {
            "No processes in this session.".to_string()
        } else {
            processes
                .iter()
                .map(|p| {
                    format!(
                        "{}\tpid {}\t{}\t{:.1}s\t{}",
                        p.name,
                        p.pid,
                        p.status,
                        p.uptime_ms as f64 / 1000.0,
                        // A newline or tab in the command cannot start a
                        // row or a field of its own (SPEC §2): escaped as
                        // the listings escape names.
                        crate::output::truncate_for_message(&crate::path::escape_name(
                            p.command.as_bytes()
                        ))
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        Ok(ToolOutput::ok(text, ListOutput { processes }))
    }
}

/// Arguments of `write_stdin`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StdinParams {
    /// Process name (started with `stdin: true`).
    pub name: String,
    /// Text to write; include `\n` to end a line.
    pub input: String,
}

/// Result of `write_stdin`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct StdinOutput {
    /// The process name.
    pub name: String,
    /// Bytes written.
    pub written: u64,
}

/// The `write_stdin` tool.
pub struct WriteStdin;

impl Tool for WriteStdin {
    const NAME: &'static str = "write_stdin";
    const FACTS: super::ToolFacts = super::command(false);
    fn description(d: &super::Describe<'_>) -> String {
        format!(
            "Write text to the stdin of a background process of this session started with \
             `stdin: true`; use it to answer a REPL or an interactive prompt.{}",
            d.mention(ProcessLogs::NAME, |logs| format!(
                " Read its answer with {logs}."
            )),
        )
    }
    const ANNOTATIONS: Annotations = Annotations {
        read_only: false,
        destructive: false,
        idempotent: false,
        open_world: false,
    };
    type Params = StdinParams;
    type Output = StdinOutput;

    fn call(ctx: &Ctx<'_>, p: StdinParams) -> Result<ToolOutput<StdinOutput>> {
        if p.input.len() > MAX_STDIN_BYTES {
            return Err(Error::new(
                ErrorKind::TooLarge,
                format!(
                    "`input` is {} bytes, the limit is {MAX_STDIN_BYTES}",
                    p.input.len()
                ),
            ));
        }
        let proc = find(ctx, &p.name)?;
        if proc.status() != Status::Running {
            return Err(Error::invalid_input(format!(
                "`{}` is not running ({}); start it again",
                p.name,
                proc.status().describe()
            )));
        }
        let written = proc.write_stdin(p.input.as_bytes())?;
        let text = if written == p.input.len() {
            format!("Wrote {} bytes to `{}`.", thousands(written as u64), p.name)
        } else {
            format!(
                "Wrote {} of {} bytes to `{}`: it is not reading its stdin now; try the rest later.",
                thousands(written as u64),
                thousands(p.input.len() as u64),
                p.name
            )
        };
        Ok(ToolOutput::ok(
            text,
            StdinOutput {
                name: p.name,
                written: written as u64,
            },
        ))
    }
}

/// Arguments of `preview`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PreviewParams {
    /// Port inside the sandbox.
    pub port: u16,
    /// Path part of the URL (default `/`).
    #[serde(default)]
    pub path: Option<String>,
}

/// Result of `preview`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct PreviewOutput {
    /// A URL on the host that reaches the port.
    pub url: String,
}

/// The `preview` tool.
pub struct Preview;

impl Tool for Preview {
    const NAME: &'static str = "preview";
    const FACTS: super::ToolFacts = super::command(true);
    fn description(_d: &super::Describe<'_>) -> String {
        "Get a URL on the host that reaches a port a process in the sandbox listens on; use it \
         to open a server of the sandbox in a browser or fetch it from outside."
            .to_string()
    }
    const ANNOTATIONS: Annotations = READ_ONLY;
    type Params = PreviewParams;
    type Output = PreviewOutput;

    fn call(ctx: &Ctx<'_>, p: PreviewParams) -> Result<ToolOutput<PreviewOutput>> {
        if p.port == 0 {
            return Err(Error::invalid_input("`port` must be between 1 and 65535"));
        }
        ports_reach_the_host(ctx, p.port)?;
        let path = p.path.unwrap_or_default();
        if path.chars().any(|c| c.is_control() || c == ' ') {
            return Err(Error::invalid_input(
                "`path` must not contain spaces or control characters",
            ));
        }
        let path = path.trim_start_matches('/');
        // The command shares the host's network (`local`, or `linux` with
        // network `on`): the port is the host's.
        let url = format!("http://127.0.0.1:{}/{path}", p.port);
        Ok(ToolOutput::ok(url.clone(), PreviewOutput { url }))
    }
}
