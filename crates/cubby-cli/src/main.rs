//! The `cubby` binary: call and inspect cubby's tools from a shell.
//!
//! Subcommands (SPEC §6): `call TOOL [JSON] [--json]` runs one tool call and
//! prints the model-facing text (exit 1 on an error result); `tools
//! [--format mcp|openai|anthropic]` prints the offered tool definitions.
//! Common flags `--root`, `--config`, `--mode`, `--provider` win over the
//! config file. Logs go to stderr (`RUST_LOG`).

mod exec;
mod setup;

use std::io::{Read, Write};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde_json::{Value, json};

/// cubby: the workspace an AI agent reads, edits and runs commands in.
#[derive(Debug, Parser)]
#[command(name = "cubby", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Flags every subcommand takes.
#[derive(Debug, Args, Clone)]
pub struct Common {
    /// Workspace root (default: the current directory).
    #[arg(long, global = true)]
    root: Option<std::path::PathBuf>,
    /// Config file (default: `cubby.toml` in the root, when present).
    #[arg(long, global = true)]
    config: Option<std::path::PathBuf>,
    /// Mode: read-only, workspace-write or full-access.
    #[arg(long, global = true)]
    mode: Option<String>,
    /// Provider: virtual, local, linux or remote (with a [remote] section).
    #[arg(long, global = true)]
    provider: Option<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve MCP over stdio (one session: the run lasts as long as stdin).
    Mcp {
        #[command(flatten)]
        common: Common,
    },
    /// Serve MCP over streamable HTTP at /mcp (off loopback, a token is required);
    /// with --host, also the sandbox host API at /v1.
    Serve {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:8765")]
        listen: std::net::SocketAddr,
        /// A file holding the bearer token (instead of CUBBY_TOKEN).
        #[arg(long)]
        token_file: Option<std::path::PathBuf>,
        /// Also serve the sandbox host API at /v1 (needs a token).
        #[arg(long)]
        host: bool,
        /// Where the host makes its sandboxes' workspaces (default: a
        /// private directory in $TMPDIR, removed at exit).
        #[arg(long, requires = "host")]
        host_dir: Option<std::path::PathBuf>,
        /// Let callers use existing directories under DIR as workspaces.
        #[arg(long, requires = "host", value_name = "DIR")]
        host_adopt: Option<std::path::PathBuf>,
        /// Most sandboxes held at once.
        #[arg(long, requires = "host", default_value_t = cubby::host::MAX_SANDBOXES)]
        host_max: usize,
        /// Destroy a sandbox after this many seconds with no command running
        /// and no request about it (0: never).
        #[arg(long, requires = "host", value_name = "SECS",
              default_value_t = cubby::host::IDLE_EXPIRY.as_secs())]
        host_idle: u64,
        /// Let one caller exchange the token, once, for a fresh one of its
        /// own (`POST /v1/bind`; a warm pool's pods).
        #[arg(long, requires = "host")]
        host_bind: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Run one tool call and print the model-facing text (exit 1 on an error result).
    Call {
        /// Tool name, e.g. read_file.
        tool: String,
        /// Arguments as one JSON object (`-` reads them from stdin; default `{}`).
        json: Option<String>,
        /// Print {"text", "structured", "is_error"} as one JSON object instead.
        #[arg(long)]
        json_output: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Run one command in the sandbox; stdio and exit code passed through.
    Exec {
        /// Network for the command: off (loopback only), allow (through the
        /// egress proxy, `[network]` domain lists enforced) or on.
        #[arg(long)]
        network: Option<String>,
        /// The command and its arguments (after `--`).
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Report what isolation this machine supports and what cubby will do.
    Doctor {
        /// Accept the changed tool definitions of upstream LABEL (they
        /// replace the pinned ones), then report.
        #[arg(long, value_name = "LABEL")]
        accept_upstream: Vec<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Print the offered tool definitions as JSON.
    Tools {
        /// Shape of the definitions.
        #[arg(long, value_enum, default_value_t = Format::Mcp)]
        format: Format,
        #[command(flatten)]
        common: Common,
    },
}

/// Tool definition formats.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    /// MCP `tools/list` entries: name, description, inputSchema, annotations
    /// (and outputSchema with `[mcp] structured_content = true`).
    Mcp,
    /// OpenAI Chat Completions function tools with strict schemas.
    Openai,
    /// Anthropic Messages API tools: name, description, input_schema.
    Anthropic,
}

fn main() -> ExitCode {
    let args = rename_json_flag(std::env::args_os().collect());
    let cli = Cli::parse_from(args);
    setup::init_tracing();
    // Every session's commands and file opens share the server's
    // descriptors: the soft limit a login session gives (1,024) is raised
    // to the hard one (SECURITY.md, "Resources").
    if let Err(e) = cubby::process::raise_open_files_limit() {
        tracing::warn!("cannot raise the open-files limit: {e}");
    }
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("cubby: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// SPEC spells the flag `--json`; clap cannot have a flag and a positional
/// both named `json`, so the flag is renamed before parsing.
fn rename_json_flag(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut out = Vec::with_capacity(args.len());
    let mut after_dashes = false;
    for a in args {
        if a == "--" {
            after_dashes = true;
        }
        if !after_dashes && a == "--json" {
            out.push("--json-output".into());
        } else {
            out.push(a);
        }
    }
    out
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// stdin and stdout for `cubby mcp`. When they are pipes (as MCP clients
/// start servers), they are read and written non-blocking on the runtime's
/// event loop; `tokio::io::stdin`/`stdout` would instead hand every read and
/// write to a blocking thread, two thread hops per request. Anything else (a
/// file, a terminal) falls back to those.
fn stdio_streams() -> (
    Box<dyn tokio::io::AsyncRead + Unpin + Send>,
    Box<dyn tokio::io::AsyncWrite + Unpin + Send>,
) {
    use std::os::fd::AsFd;
    use tokio::net::unix::pipe;
    let input = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .ok()
        .and_then(|fd| pipe::Receiver::from_file(std::fs::File::from(fd)).ok());
    let output = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .ok()
        .and_then(|fd| pipe::Sender::from_file(std::fs::File::from(fd)).ok());
    let input: Box<dyn tokio::io::AsyncRead + Unpin + Send> = match input {
        Some(pipe) => Box::new(pipe),
        None => Box::new(tokio::io::stdin()),
    };
    let output: Box<dyn tokio::io::AsyncWrite + Unpin + Send> = match output {
        Some(pipe) => Box::new(pipe),
        None => Box::new(tokio::io::stdout()),
    };
    (input, output)
}

/// How long a server that was told to end waits for tool calls in flight.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Resolves at the first SIGTERM or SIGINT (never, for a signal whose
/// handler cannot be installed).
async fn termination() {
    use tokio::signal::unix::{Signal, SignalKind, signal};
    async fn recv(s: Option<&mut Signal>) {
        match s {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    }
    let mut term = signal(SignalKind::terminate()).ok();
    let mut int = signal(SignalKind::interrupt()).ok();
    tokio::select! {
        () = recv(term.as_mut()) => {}
        () = recv(int.as_mut()) => {}
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Mcp { common } => {
            let (factory, mcp) = setup::served(&common)?;
            // One session: its JSON work on one thread (no cross-thread
            // wake-ups between the guard, rmcp and the writer); tool calls
            // still run on the blocking pool, in parallel.
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let served = rt.block_on(async move {
                let (input, output) = stdio_streams();
                // SIGTERM (how Codex CLI ends its MCP servers) and SIGINT end
                // the session as stdin EOF does: the run is ended (its
                // processes stopped, its output directory collected), then
                // the serving future returns and with it the workspace, its
                // sandbox (its placeholder stash emptied) and its store are
                // dropped.
                let shutdown = tokio_util::sync::CancellationToken::new();
                let stop = shutdown.clone();
                tokio::spawn(async move {
                    termination().await;
                    stop.cancel();
                });
                cubby_mcp::serve_stdio_until(factory, mcp, input, output, shutdown).await
            });
            // A tool call still running on the blocking pool holds the
            // sandbox: it gets a moment to end (its command is killed with
            // the sandbox); what a killed server leaves, the next start
            // reclaims.
            rt.shutdown_timeout(SHUTDOWN_GRACE);
            cubby::LinuxSandbox::empty_stashes();
            served?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Serve {
            listen,
            token_file,
            host,
            host_dir,
            host_adopt,
            host_max,
            host_idle,
            host_bind,
            common,
        } => {
            // Commands (the served workspace's and every hosted sandbox's)
            // never read the token's file nor the hosted workspaces but
            // their own.
            let token = match &token_file {
                Some(file) => Some(setup::read_token(file)?),
                None => std::env::var("CUBBY_TOKEN").ok().filter(|t| !t.is_empty()),
            };
            if host && token.is_none() {
                anyhow::bail!("--host needs a bearer token: set CUBBY_TOKEN or pass --token-file");
            }
            let mut hidden = setup::Hidden::default();
            hidden.deny_read.extend(token_file.clone());
            let layout = if host {
                let layout =
                    setup::HostLayout::new(&common, host_dir, host_adopt, token_file.as_deref())?;
                // The served root too: a hosted sandbox's commands do not
                // read the `/mcp` workspace (the served one's skip it as
                // their own).
                hidden
                    .private_dirs
                    .extend([layout.dir.clone(), layout.root.clone()]);
                hidden.private_dirs.extend(layout.adopt.clone());
                hidden.stores = Some(layout.stores());
                Some(layout)
            } else {
                None
            };
            let (factory, mcp) = match setup::served_hiding(&common, &hidden) {
                Ok(served) => served,
                Err(e) => {
                    if let Some(layout) = &layout {
                        layout.discard();
                    }
                    return Err(e);
                }
            };
            let hosted = if let Some(layout) = layout {
                let Some(token) = token.as_deref() else {
                    anyhow::bail!(
                        "--host needs a bearer token: set CUBBY_TOKEN or pass --token-file"
                    );
                };
                let hosting = setup::host(&common, &hidden, layout, host_max, host_idle, token)?;
                if host_bind {
                    hosting.api.allow_bind();
                }
                Some(hosting)
            } else {
                None
            };
            let api = hosted.as_ref().map(|h| h.api.clone());
            let rt = runtime()?;
            let served = rt.block_on(async move {
                let shutdown = tokio_util::sync::CancellationToken::new();
                let stop = shutdown.clone();
                tokio::spawn(async move {
                    termination().await;
                    stop.cancel();
                });
                let has_token = token.is_some();
                let with_host = api.is_some();
                let options = cubby_mcp::HttpOptions {
                    listen,
                    token,
                    mcp,
                    host: api,
                    limits: cubby::host::http::ConnectionLimits::for_this_process(),
                };
                let (ready, bound) = tokio::sync::oneshot::channel();
                tokio::spawn(async move {
                    if let Ok(addr) = bound.await {
                        eprintln!("cubby: listening on http://{addr}/mcp");
                        if with_host {
                            eprintln!("cubby: sandbox host API at http://{addr}/v1");
                        }
                        if !has_token {
                            // R4-2 (docs/SECURITY.md): the peer check tells
                            // users apart, not a user's sandboxed commands.
                            eprintln!(
                                "cubby: no CUBBY_TOKEN: only this user's connections are \
                                 answered, and commands of this user with network \"on\" \
                                 are this user too; set CUBBY_TOKEN where such sandboxes run"
                            );
                        }
                    }
                });
                cubby_mcp::serve_http(factory, options, shutdown, Some(ready)).await
            });
            rt.shutdown_timeout(SHUTDOWN_GRACE);
            // Every hosted sandbox ends with the server: its commands
            // killed and reaped, the workspaces it made removed.
            drop(hosted);
            cubby::LinuxSandbox::empty_stashes();
            served?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Call {
            tool,
            json,
            json_output,
            common,
        } => {
            // The snapshot only for a tool that reads it (`changes`).
            let snapshot =
                cubby::builtin_tools().any(|(name, facts)| name == tool && facts.snapshot);
            let toolset = setup::toolset(&common, snapshot)?;
            let raw = match json.as_deref() {
                Some("-") => {
                    let mut buf = Vec::new();
                    std::io::stdin().read_to_end(&mut buf)?;
                    buf
                }
                Some(text) => text.as_bytes().to_vec(),
                None => Vec::new(),
            };
            let mut out = toolset.call_json(&tool, &raw);
            // The toolset already shows control characters as pictures; this
            // is the terminal's own guard: no escape sequence is printed,
            // whatever a tool (a custom one, say) returned.
            cubby::output::neutralize_output(&mut out);
            let mut stdout = std::io::stdout().lock();
            if json_output {
                // serde_json writes every control character as `\u00XX`.
                let doc = json!({"text": out.text, "structured": out.structured, "is_error": out.is_error});
                writeln!(stdout, "{doc}")?;
            } else {
                stdout.write_all(out.text.as_bytes())?;
                if !out.text.ends_with('\n') {
                    stdout.write_all(b"\n")?;
                }
            }
            stdout.flush()?;
            Ok(if out.is_error {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Exec {
            network,
            command,
            common,
        } => exec::run(&common, network.as_deref(), command),
        Command::Doctor {
            common,
            accept_upstream,
        } => exec::doctor(&common, &accept_upstream),
        Command::Tools { format, common } => {
            // Tracking on, so that `changes` is listed; the snapshot thread dies with the process.
            let (factory, mcp) = setup::served(&common)?;
            let toolset = factory().map_err(|e| anyhow::anyhow!("{}", e.message()))?;
            let specs: Vec<Value> = toolset
                .tools()
                .into_iter()
                .map(|t| match format {
                    // As `tools/list` shows it (SPEC §2).
                    Format::Mcp => cubby_mcp::tool_definition(&t, mcp),
                    Format::Openai => t.openai(),
                    Format::Anthropic => t.anthropic(),
                })
                .collect();
            println!("{}", serde_json::to_string_pretty(&specs)?);
            Ok(ExitCode::SUCCESS)
        }
    }
}
