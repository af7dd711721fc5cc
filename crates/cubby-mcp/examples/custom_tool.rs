//! A custom tool written in Rust, served over MCP stdio beside cubby's
//! built-in tools.
//!
//! `make_report` writes a CSV report (`n`, `n²` and the running sum for
//! `n` in `1..=rows`, optionally `delay_ms` per row, to have something slow
//! to cancel), publishes it as an artifact of the session's run and
//! returns a summary. It honours cancellation: a client's
//! `notifications/cancelled` stops it between two rows, and nothing is
//! published. Its log lines (and every other event of a run) are printed
//! on stderr.
//!
//! ```text
//! cargo run -p cubby-mcp --example custom_tool -- [--root DIR] [--store DIR]
//! ```
//!
//! `--root`: the workspace the built-in tools act in, with the `local`
//! provider (default: an empty in-memory workspace, the `virtual`
//! provider). `--store`: the directory of the artifact store (default:
//! cubby's, under its state directory).
//!
//! It lives in `cubby-mcp` rather than `cubby`: the stdio front is this
//! crate's, and `cubby` may not depend on the crates above it.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use cubby::process::{OutputEvent, Subscriber};
use cubby::{
    Annotations, CustomTool, Error, ErrorKind, ToolContext, ToolResult, Toolset, ToolsetFactory,
};
use cubby_mcp::McpOptions;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The most rows a report has.
const MAX_ROWS: u32 = 100_000;
/// The longest wait per row, in milliseconds.
const MAX_DELAY_MS: u32 = 1_000;
/// Rows between two progress lines in the log.
const LOG_EVERY: u32 = 1_000;
/// How long the server waits for calls in flight when its input ends.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// The tool's arguments: the input schema is derived from this struct, its
/// doc comments become the argument help.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReportParams {
    /// Rows of the report, 1 to 100,000.
    rows: u32,
    /// Milliseconds to wait before each row, 0 to 1,000 (default 0).
    #[serde(default)]
    delay_ms: u32,
    /// The artifact's name (default `report.csv`).
    #[serde(default)]
    name: Option<String>,
}

/// The structured part of a result.
#[derive(Serialize)]
struct Summary {
    /// Rows written.
    rows: u32,
    /// The sum of `n²` over the rows.
    sum_of_squares: u64,
    /// The artifact's URI (`resources/read` reads it).
    uri: String,
    /// The artifact's sha256.
    sha256: String,
}

struct MakeReport;

impl CustomTool for MakeReport {
    type Params = ReportParams;

    fn name(&self) -> &str {
        "make_report"
    }

    fn description(&self) -> String {
        format!(
            "Makes a CSV report of n, n² and the running sum for n from 1 to `rows` and publishes \
             it as a file for the user; use it when asked for a report of squares. At most \
             {MAX_ROWS} rows; `delay_ms` (at most {MAX_DELAY_MS}) slows each row. The call can \
             be cancelled."
        )
    }

    fn annotations(&self) -> Annotations {
        // It changes nothing in the workspace and reaches nothing outside.
        Annotations {
            read_only: true,
            destructive: false,
            idempotent: true,
            open_world: false,
        }
    }

    fn call(&self, p: ReportParams, ctx: &ToolContext<'_>) -> cubby::Result<ToolResult> {
        if !(1..=MAX_ROWS).contains(&p.rows) {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("`rows` is {}; give 1 to {MAX_ROWS}", p.rows),
            ));
        }
        if p.delay_ms > MAX_DELAY_MS {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("`delay_ms` is {}; give 0 to {MAX_DELAY_MS}", p.delay_ms),
            ));
        }
        let name = p.name.as_deref().unwrap_or("report.csv");
        ctx.log(&format!(
            "call {}: {} rows into {name}",
            ctx.call_id(),
            p.rows
        ));
        let mut csv = String::from("n,square,running_sum\n");
        let mut sum = 0u64;
        for n in 1..=p.rows {
            let cancelled = if p.delay_ms > 0 {
                ctx.wait_cancelled(Duration::from_millis(u64::from(p.delay_ms)))
            } else {
                ctx.cancelled()
            };
            if cancelled {
                ctx.log(&format!(
                    "call {}: cancelled after {} of {} rows; nothing published",
                    ctx.call_id(),
                    n - 1,
                    p.rows
                ));
                // As `run` says of a cancelled command: a verdict, not an
                // error (the client that cancelled no longer waits for it).
                return Ok(ToolResult::text(format!(
                    "CANCELLED after {} of {} rows; nothing was published.",
                    n - 1,
                    p.rows
                )));
            }
            let square = u64::from(n) * u64::from(n);
            sum += square;
            csv.push_str(&format!("{n},{square},{sum}\n"));
            if n % LOG_EVERY == 0 || (p.delay_ms > 0 && n == 1) {
                ctx.log(&format!("call {}: row {n} of {}", ctx.call_id(), p.rows));
            }
        }
        let file = ctx.publish(name, Some("text/csv"), csv.as_bytes())?;
        ToolResult::json(
            format!(
                "Made a report of {} rows; the sum of the squares is {sum}.",
                p.rows
            ),
            &Summary {
                rows: p.rows,
                sum_of_squares: sum,
                uri: file.uri,
                sha256: file.sha256,
            },
        )
    }
}

/// `--root DIR` and `--store DIR`.
struct Args {
    root: Option<std::path::PathBuf>,
    store: Option<std::path::PathBuf>,
}

fn args() -> Result<Args, String> {
    let mut args = Args {
        root: None,
        store: None,
    };
    let mut it = std::env::args_os().skip(1);
    while let Some(arg) = it.next() {
        let slot = match arg.to_str() {
            Some("--root") => &mut args.root,
            Some("--store") => &mut args.store,
            _ => {
                return Err(format!(
                    "unknown argument {}; usage: custom_tool [--root DIR] [--store DIR]",
                    arg.to_string_lossy()
                ));
            }
        };
        let value = it
            .next()
            .ok_or_else(|| format!("{} needs a directory", arg.to_string_lossy()))?;
        *slot = Some(value.into());
    }
    Ok(args)
}

/// A fresh toolset per run (MCP session): the built-in tools over the
/// sandbox, and the custom tool.
fn factory(args: &Args) -> cubby::Result<ToolsetFactory> {
    let sandbox = match &args.root {
        Some(root) => cubby::local_sandbox(root)?,
        None => cubby::virtual_sandbox(cubby::MemoryFs::new()),
    };
    let store = match &args.store {
        Some(dir) => Some(Arc::new(cubby::artifact::Store::open(dir)?)),
        None => None,
    };
    let events: Subscriber = Arc::new(|e: &OutputEvent| {
        eprint!("[{}] {}", e.process, e.chunk);
    });
    Ok(Arc::new(move || {
        let mut builder = Toolset::builder(sandbox.clone())
            .subscribe(events.clone())
            .tool(MakeReport);
        if let Some(store) = &store {
            builder = builder.artifact_store(store.clone());
        }
        builder.build()
    }))
}

/// Serves the custom tool and the built-in tools over stdio until EOF.
pub fn main() -> ExitCode {
    let served = args().and_then(|args| {
        let factory = factory(&args).map_err(|e| e.to_string())?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let served = rt.block_on(cubby_mcp::serve_stdio(
            factory,
            McpOptions::default(),
            tokio::io::stdin(),
            tokio::io::stdout(),
        ));
        rt.shutdown_timeout(SHUTDOWN_GRACE);
        served.map_err(|e| e.to_string())
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("custom_tool: {e}");
            ExitCode::FAILURE
        }
    }
}
