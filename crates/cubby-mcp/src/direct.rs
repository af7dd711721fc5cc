//! The stdio front's fast path: which `tools/call` requests the front
//! answers itself instead of handing them to rmcp's dispatch.
//!
//! rmcp spawns a task, builds a request context and a cancellation token
//! for every request; for the calls agents make most (the tools whose facts
//! say their cost is bounded — today `read_file` and `list_files`, see
//! `handler::is_direct`) the front skips that and calls the
//! handler's `direct_answer`, which gives what rmcp would send (the
//! `direct_answers_are_rmcps_answers` test in `stdio.rs` and
//! `tests/fronts.rs` hold both to it). The switch is
//! [`McpOptions::fast_path`](crate::McpOptions::fast_path) (`[mcp]
//! fast_path` in the config, on by default); off, every call goes to rmcp.

use rmcp::model::{CallToolRequest, JsonRpcRequest, RequestId};
use serde_json::Value;

/// Who answers a `tools/call`.
pub(crate) enum Route {
    /// The front itself, bypassing rmcp's dispatch: the id, tool name and
    /// arguments.
    Direct(RequestId, String, Value),
    /// rmcp.
    Rmcp(JsonRpcRequest<CallToolRequest>),
}

/// Direct only with the fast path on, in a `legacy` session (opened with
/// `initialize` on a revision before 2026-07-28), for a tool `direct`
/// accepts, with no `_meta` anywhere in the line (progress tokens and the
/// 2026-07-28 per-request fields stay with rmcp).
pub(crate) fn route(
    request: JsonRpcRequest<CallToolRequest>,
    line: &[u8],
    legacy: bool,
    fast_path: bool,
    direct: impl Fn(&str) -> bool,
) -> Route {
    const META: &[u8] = b"\"_meta\"";
    let params = &request.request.params;
    if !fast_path
        || !legacy
        || !direct(params.name.as_ref())
        || params.input_responses.is_some()
        || params.request_state.is_some()
        || line.windows(META.len()).any(|w| w == META)
    {
        return Route::Rmcp(request);
    }
    let params = request.request.params;
    let arguments = params.arguments.map(Value::Object).unwrap_or(Value::Null);
    Route::Direct(request.id, params.name.into_owned(), arguments)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(line: &str) -> JsonRpcRequest<CallToolRequest> {
        serde_json::from_str(line).unwrap()
    }

    fn is_direct(line: &str, legacy: bool, fast_path: bool) -> bool {
        // The tools the built-in catalog calls bounded.
        let catalog = cubby::Toolset::builder(cubby::virtual_sandbox(cubby::MemoryFs::new()))
            .build()
            .unwrap()
            .catalog()
            .clone();
        matches!(
            route(call(line), line.as_bytes(), legacy, fast_path, |n| {
                crate::handler::is_direct(&catalog, n)
            }),
            Route::Direct(..)
        )
    }

    #[test]
    fn only_plain_file_calls_of_a_legacy_session_go_direct_and_only_with_the_switch_on() {
        let read = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"a"}}}"#;
        let list =
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"list_files"}}"#;
        let run = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"run","arguments":{"command":"true"}}}"#;
        let meta = r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"a"},"_meta":{"progressToken":1}}}"#;
        assert!(is_direct(read, true, true));
        assert!(is_direct(list, true, true));
        assert!(!is_direct(run, true, true));
        assert!(!is_direct(meta, true, true));
        assert!(
            !is_direct(read, false, true),
            "2026-07-28 sessions stay with rmcp"
        );
        for line in [read, list, run, meta] {
            assert!(!is_direct(line, true, false), "the switch off: {line}");
        }
    }
}
