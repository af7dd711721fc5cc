//! `run`: one shell command, waited for, with a verdict line and bounded
//! output.
//!
//! # Caveats
//!
//! - The command runs as `shell + [command]` (default `bash -c`, `sh -c`
//!   where there is no bash) with stdin closed and a non-interactive
//!   environment (`crate::sandbox::env`): a command that would prompt gets
//!   EOF at once. It gets only the variables SPEC §4 lists, not cubby's
//!   whole environment.
//! - When the command's main process exits, the rest of its tree is killed:
//!   a `run` leaves nothing behind. Use `start_process` for servers.
//! - On timeout or cancellation the whole tree is killed at once (no grace),
//!   daemons and double-forks included.

use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::procs::{ProcessLogs, StartProcess};
use super::write::WriteFile;
use super::{Annotations, Ctx, Tool};
use crate::error::{Error, ErrorKind, Result};
use crate::output::ToolOutput;
use crate::path::WorkspacePath;
use crate::process::{Proc, Status, Track, signal_name};
use crate::sandbox::ExecSpec;

/// Longest command line accepted, in bytes.
pub const MAX_COMMAND_BYTES: usize = 128 * 1024;

/// Arguments of `run`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// Shell command line to run (bash -c). Stdin is closed; do not run interactive programs.
    pub command: String,
    /// Working directory relative to the workspace root (default: the root).
    #[serde(default)]
    pub cwd: Option<String>,
    /// Timeout in milliseconds (default and most: see the tool description). On timeout the whole process tree is killed.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// Result of `run`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Output {
    /// The process name, for `process_logs`.
    pub name: String,
    /// Exit code, when the command exited.
    pub exit_code: Option<i32>,
    /// Signal name (`KILL`, `TERM`, …), when it was killed by one.
    pub signal: Option<String>,
    /// True when the timeout killed it.
    pub timed_out: bool,
    /// Wall time in milliseconds.
    pub duration_ms: u64,
    /// Working directory.
    pub cwd: String,
    /// Combined stdout+stderr, ANSI-stripped, capped as head and tail.
    pub output: String,
    /// Bytes the command printed in all.
    pub output_bytes: u64,
    /// Bytes cut from the middle of `output`.
    pub cut_bytes: u64,
    /// Artifacts the command left in `$CUBBY_OUTPUT_DIR`, new in this call.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<crate::artifact::FileRef>,
    /// Files in `$CUBBY_OUTPUT_DIR` that were not published, with why: the
    /// first 20, then a line counting the rest (and one when the walk
    /// stopped at its bound of entries or time).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
}

/// The `run` tool.
pub struct Run;

/// Resolves the shared inputs of `run` and `start_process`: checks the
/// command, the exec rules and `before_run`; returns the command to run and
/// its working directory.
pub(crate) fn prepare(
    ctx: &Ctx<'_>,
    command: &str,
    cwd: Option<&str>,
) -> Result<(String, WorkspacePath)> {
    if command.trim().is_empty() {
        return Err(Error::invalid_input(
            "`command` is empty; pass a shell command line",
        ));
    }
    if command.len() > MAX_COMMAND_BYTES {
        return Err(Error::invalid_input(format!(
            "`command` is {} bytes, the limit is {MAX_COMMAND_BYTES}; write a script with {} and run it",
            command.len(),
            WriteFile::NAME
        )));
    }
    if command.contains('\0') {
        return Err(Error::invalid_input("`command` contains a NUL byte"));
    }
    let cwd = super::parse_dir_arg(cwd)?;
    ctx.policy.check_read(&cwd)?;
    let meta = ctx.fs.metadata(&cwd)?;
    if meta.kind != crate::sandbox::EntryKind::Dir {
        return Err(Error::invalid_input(format!(
            "`cwd` `{cwd}` is not a directory; pass a directory relative to the workspace root"
        )));
    }
    let mut command = crate::exec_policy::apply_rules(&ctx.exec.rules, command)?;
    if let Some(hook) = &ctx.exec.before_run {
        match hook(&command, &cwd) {
            crate::exec_policy::RunDecision::Allow => {}
            crate::exec_policy::RunDecision::Refuse(reason) => {
                return Err(Error::denied(format!("the command was refused: {reason}")));
            }
            crate::exec_policy::RunDecision::Replace(next) => command = next,
        }
    }
    Ok((command, cwd))
}

/// Starts `command` in `cwd` and registers it under `name`.
pub(crate) fn start(
    ctx: &Ctx<'_>,
    name: String,
    command: &str,
    cwd: &WorkspacePath,
    stdin: bool,
    capture: Option<usize>,
    call_subscriber: Option<crate::process::Subscriber>,
) -> Result<std::sync::Arc<Proc>> {
    // Its place and its window in the run's log budget first, and the
    // server's descriptors: a start refused there never runs.
    crate::process::check_fd_budget()?;
    let reserved = ctx.procs.reserve(&name, ctx.exec.retained_log_bytes)?;
    ctx.run.before_mutation();
    let mut argv = ctx.exec.shell.clone();
    argv.push(command.to_string());
    let mut env = ctx.exec.env.build(ctx.exec.host.vars(), true);
    let _output = crate::sync::lock(&ctx.run.output_lock);
    let output_dir = ctx.run.output_dir(ctx.fs, ctx.policy);
    if let Some(dir) = output_dir
        .as_ref()
        .and_then(|d| ctx.sandbox.command_path(d))
    {
        env.retain(|(name, _)| name != super::publish::OUTPUT_DIR_ENV);
        env.push((super::publish::OUTPUT_DIR_ENV.into(), dir.into_os_string()));
    }
    let spawned = ctx.sandbox.exec(&ExecSpec {
        argv,
        cwd: cwd.clone(),
        env,
        stdin,
        output_dir,
    })?;
    // Tracked (listed as running) before the lock is let go.
    ctx.procs.track(
        reserved,
        spawned,
        Track {
            name,
            command: command.to_string(),
            capture_bytes: capture,
            call_subscriber,
        },
    )
}

fn seconds(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

impl Tool for Run {
    const NAME: &'static str = "run";
    const FACTS: super::ToolFacts = super::ToolFacts {
        streaming: true,
        ..super::command(false)
    };
    fn description(d: &super::Describe<'_>) -> String {
        let l = &d.limits.run;
        format!(
            "Run a shell command in the sandboxed workspace and wait for it; {} shell or \
             terminal tool: the command runs in the workspace's sandbox. Returns a verdict line \
             (`OK exit=0 1.2s cwd=…`, `FAILED exit=N …`, `FAILED timeout …`, `FAILED \
             signal=KILL …`), then the combined stdout+stderr, cut to {} as head and tail{}. \
             Timeout {} unless `timeout_ms` says otherwise (at most {}); on timeout the whole \
             process tree is killed. Stdin is closed{}.",
            super::PREFER,
            super::size(l.max_output_bytes as u64),
            d.mention(ProcessLogs::NAME, |logs| format!(
                " (page the rest with {logs})"
            )),
            super::millis(l.timeout_ms),
            super::millis(l.max_timeout_ms),
            d.mention(StartProcess::NAME, |start| format!(
                "; start servers and watchers with {start}"
            )),
        )
    }
    const ANNOTATIONS: Annotations = Annotations {
        read_only: false,
        destructive: true,
        idempotent: false,
        open_world: true,
    };
    type Params = Params;
    type Output = Output;

    fn call(ctx: &Ctx<'_>, params: Params) -> Result<ToolOutput<Output>> {
        let limits = &ctx.limits.run;
        let timeout_ms = params
            .timeout_ms
            .unwrap_or(limits.timeout_ms)
            .clamp(1, limits.max_timeout_ms);
        let (command, cwd) = prepare(ctx, &params.command, params.cwd.as_deref())?;
        let name = ctx.procs.next_run_name();
        let started = Instant::now();
        let proc = start(
            ctx,
            name.clone(),
            &command,
            &cwd,
            false,
            Some(limits.max_output_bytes),
            ctx.on_output.cloned(),
        )?;
        let deadline = started + Duration::from_millis(timeout_ms);
        let finished = proc.wait_until(Some(deadline), ctx.cancel);
        let cancelled = !finished && ctx.cancel.is_some_and(|c| c.is_cancelled());
        if !finished {
            proc.kill_tree();
        }
        let elapsed = started.elapsed();
        ctx.procs.retire(&name);
        if let Some(reason) = proc.lost() {
            // The machine that ran it went away (SPEC §7): what it printed
            // is not a verdict.
            return Err(Error::new(
                ErrorKind::Network,
                format!(
                    "the command's end is unknown: {reason}. Its output so far is in \
                     process_logs name={name}; check the sandbox is reachable, then run it again"
                ),
            ));
        }
        let status = proc.status();
        let shown_cwd = ctx.sandbox.show_cwd(&cwd);
        let (output, output_bytes, cut_bytes) = proc.captured();
        let (exit_code, signal) = match status {
            Status::Exited(c) => (Some(c), None),
            Status::Signaled(s) => (None, Some(signal_name(s))),
            Status::Running => (None, None),
        };
        let verdict = if cancelled {
            format!("FAILED cancelled {} cwd={shown_cwd}", seconds(elapsed))
        } else if !finished {
            format!(
                "FAILED timeout {} cwd={shown_cwd}",
                seconds(Duration::from_millis(timeout_ms))
            )
        } else {
            match status {
                Status::Exited(0) => format!("OK exit=0 {} cwd={shown_cwd}", seconds(elapsed)),
                Status::Exited(c) => {
                    format!("FAILED exit={c} {} cwd={shown_cwd}", seconds(elapsed))
                }
                Status::Signaled(s) => format!(
                    "FAILED signal={} {} cwd={shown_cwd}",
                    signal_name(s),
                    seconds(elapsed)
                ),
                Status::Running => format!("FAILED timeout {} cwd={shown_cwd}", seconds(elapsed)),
            }
        };
        let mut text = format!("{verdict}\noutput:\n{output}");
        if !text.ends_with('\n') {
            text.push('\n');
        }
        let collected = ctx.run.made_output_dir(ctx.fs).map(|dir| {
            let found = super::publish::collect(ctx.fs, ctx.redactor, ctx.run, &dir);
            // A background process may still write there.
            let _output = crate::sync::lock(&ctx.run.output_lock);
            let live = ctx
                .procs
                .list()
                .iter()
                .any(|p| p.status() == Status::Running);
            if !live {
                ctx.run.tidy_output_dir(ctx.fs, &dir);
            }
            found
        });
        let collected = collected.unwrap_or_default();
        let mut attachments = Vec::new();
        if !collected.is_empty() {
            text.push_str(&format!("{}:", super::publish::OUTPUT_DIR_ENV));
            text.push_str(&collected.render());
            text.push('\n');
            for p in &collected.published {
                attachments.extend(super::publish::attachments(ctx.run.artifacts(), p));
            }
        }
        let mut out = ToolOutput::ok(
            text,
            Output {
                name,
                exit_code,
                signal,
                timed_out: !finished && !cancelled,
                duration_ms: elapsed.as_millis() as u64,
                cwd: shown_cwd,
                output,
                output_bytes,
                cut_bytes,
                artifacts: collected.published.iter().map(|p| p.file.clone()).collect(),
                skipped: collected.skipped_lines(),
            },
        );
        out.attachments = attachments;
        Ok(out)
    }
}
