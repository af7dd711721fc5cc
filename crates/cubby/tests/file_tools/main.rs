//! One file-tool suite, run on every provider (`virtual`, `local`, `linux`,
//! `remote`).
//!
//! Each case is a function of a [`Fixture`], which sets up and inspects the
//! workspace behind the tools' back (as another process or person would).
//! The `suite!` macro at the bottom instantiates every case for each
//! provider. The cases live by topic: `read.rs`, `write.rs` (and edit),
//! `walks.rs` (glob, list, search, changes), `view.rs`, `policy.rs`,
//! `redaction.rs`, `names.rs`, `git.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;
mod git;
mod names;
mod policy;
mod read;
mod redaction;
mod view;
mod walks;
mod write;

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use cubby::config::{Limits, MatchLimits};
use cubby::{MemoryFs, Mode, Policy, Toolset, WorkspacePath};
use serde_json::{Value, json};

trait Fixture {
    /// A sandbox over the fixture's workspace.
    fn sandbox(&self) -> Arc<dyn cubby::Sandbox> {
        self.sandbox_for(&Policy::default())
    }
    /// A sandbox over the fixture's workspace opened from `policy` (what a
    /// provider that confines commands holds them to).
    fn sandbox_for(&self, policy: &Policy) -> Arc<dyn cubby::Sandbox>;
    fn put(&self, path: &str, bytes: &[u8]);
    fn put_mode(&self, path: &str, bytes: &[u8], mode: u32);
    fn get(&self, path: &str) -> Option<Vec<u8>>;
    fn mode(&self, path: &str) -> u32;
    fn remove(&self, path: &str);
    fn mkdir(&self, path: &str);
    /// A file at the root whose name is `name`, byte for byte (control
    /// characters, invalid UTF-8).
    fn put_named(&self, name: &[u8], bytes: &[u8]);
}

struct Local(tempfile::TempDir);

impl Local {
    fn new() -> Local {
        Local(tempfile::tempdir().unwrap())
    }
    fn abs(&self, p: &str) -> std::path::PathBuf {
        self.0.path().join(p)
    }
}

impl Fixture for Local {
    fn sandbox_for(&self, _: &Policy) -> Arc<dyn cubby::Sandbox> {
        cubby::local_sandbox(self.0.path()).unwrap()
    }
    fn put(&self, path: &str, bytes: &[u8]) {
        let p = self.abs(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
    fn put_mode(&self, path: &str, bytes: &[u8], mode: u32) {
        self.put(path, bytes);
        std::fs::set_permissions(self.abs(path), std::fs::Permissions::from_mode(mode)).unwrap();
    }
    fn get(&self, path: &str) -> Option<Vec<u8>> {
        std::fs::read(self.abs(path)).ok()
    }
    fn mode(&self, path: &str) -> u32 {
        std::fs::metadata(self.abs(path))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    }
    fn remove(&self, path: &str) {
        std::fs::remove_file(self.abs(path)).unwrap();
    }
    fn mkdir(&self, path: &str) {
        std::fs::create_dir_all(self.abs(path)).unwrap();
    }
    fn put_named(&self, name: &[u8], bytes: &[u8]) {
        use std::os::unix::ffi::OsStrExt;
        let p = self.0.path().join(std::ffi::OsStr::from_bytes(name));
        std::fs::write(p, bytes).unwrap();
    }
}

/// The `linux` provider over the same host directory as [`Local`].
struct Linux(Local);

impl Fixture for Linux {
    fn sandbox_for(&self, policy: &Policy) -> Arc<dyn cubby::Sandbox> {
        Arc::new(
            cubby::LinuxSandbox::open(self.0.0.path(), policy, &cubby::HostEnv::capture()).unwrap(),
        )
    }
    fn put(&self, path: &str, bytes: &[u8]) {
        self.0.put(path, bytes)
    }
    fn put_mode(&self, path: &str, bytes: &[u8], mode: u32) {
        self.0.put_mode(path, bytes, mode)
    }
    fn get(&self, path: &str) -> Option<Vec<u8>> {
        self.0.get(path)
    }
    fn mode(&self, path: &str) -> u32 {
        self.0.mode(path)
    }
    fn remove(&self, path: &str) {
        self.0.remove(path)
    }
    fn mkdir(&self, path: &str) {
        self.0.mkdir(path)
    }
    fn put_named(&self, name: &[u8], bytes: &[u8]) {
        self.0.put_named(name, bytes)
    }
}

/// The `remote` provider over the same host directory as [`Local`]: a far
/// cubby (in this process, over loopback HTTP) holds it as a `linux`
/// sandbox.
struct Remote(Local);

impl Fixture for Remote {
    fn sandbox_for(&self, _: &Policy) -> Arc<dyn cubby::Sandbox> {
        common::remote::far_linux().sandbox(self.0.0.path())
    }
    fn put(&self, path: &str, bytes: &[u8]) {
        self.0.put(path, bytes)
    }
    fn put_mode(&self, path: &str, bytes: &[u8], mode: u32) {
        self.0.put_mode(path, bytes, mode)
    }
    fn get(&self, path: &str) -> Option<Vec<u8>> {
        self.0.get(path)
    }
    fn mode(&self, path: &str) -> u32 {
        self.0.mode(path)
    }
    fn remove(&self, path: &str) {
        self.0.remove(path)
    }
    fn mkdir(&self, path: &str) {
        self.0.mkdir(path)
    }
    fn put_named(&self, name: &[u8], bytes: &[u8]) {
        self.0.put_named(name, bytes)
    }
}

struct Virtual(Arc<MemoryFs>);

impl Virtual {
    fn new() -> Virtual {
        Virtual(Arc::new(MemoryFs::new()))
    }
}

fn wp(p: &str) -> WorkspacePath {
    WorkspacePath::parse(p).unwrap()
}

impl Fixture for Virtual {
    fn sandbox_for(&self, _: &Policy) -> Arc<dyn cubby::Sandbox> {
        cubby::virtual_sandbox(self.0.clone())
    }
    fn put(&self, path: &str, bytes: &[u8]) {
        self.0.insert(&wp(path), bytes.to_vec(), 0o644).unwrap();
    }
    fn put_mode(&self, path: &str, bytes: &[u8], mode: u32) {
        self.0.insert(&wp(path), bytes.to_vec(), mode).unwrap();
    }
    fn get(&self, path: &str) -> Option<Vec<u8>> {
        use cubby::FileSystem;
        self.0.read_to_vec(&wp(path), u64::MAX).ok()
    }
    fn mode(&self, path: &str) -> u32 {
        use cubby::FileSystem;
        self.0.metadata(&wp(path)).unwrap().mode
    }
    fn remove(&self, path: &str) {
        self.0.remove(&wp(path)).unwrap();
    }
    fn mkdir(&self, path: &str) {
        self.0.create_dir_all(&wp(path)).unwrap();
    }
    fn put_named(&self, name: &[u8], bytes: &[u8]) {
        use std::os::unix::ffi::OsStrExt;
        let p = WorkspacePath::root().join_name(std::ffi::OsStr::from_bytes(name));
        self.0.insert(&p, bytes.to_vec(), 0o644).unwrap();
    }
}

fn tools(f: &dyn Fixture) -> Toolset {
    Toolset::builder(f.sandbox()).build().unwrap()
}

/// Calls a tool and insists on success.
fn ok(t: &Toolset, name: &str, args: Value) -> cubby::ToolOutput {
    let out = t.call(name, args.clone());
    assert!(!out.is_error, "{name} {args} failed: {}", out.text);
    out
}

/// Calls a tool and insists on an error of `kind`.
fn err(t: &Toolset, name: &str, args: Value, kind: &str) -> String {
    let out = t.call(name, args.clone());
    assert!(
        out.is_error,
        "{name} {args} should fail with {kind}: {}",
        out.text
    );
    assert!(
        out.text.starts_with(&format!("ERROR {kind}: ")),
        "{name} {args}: expected {kind}, got {}",
        out.text
    );
    assert_eq!(out.structured["error"]["kind"], kind);
    out.text
}

/// One provider's module: a `#[test]` per case, calling it with a fresh
/// fixture.
macro_rules! suite {
    ($provider:ident, $make:expr, [$($module:ident :: $case:ident),* $(,)?]) => {
        mod $provider {
            use super::*;
            $(
                #[test]
                fn $case() {
                    let fixture = $make;
                    super::$module::$case(&fixture);
                }
            )*
        }
    };
}

/// Every case on every provider (a new provider is a [`Fixture`] and a
/// line here).
macro_rules! both {
    ($($module:ident :: $case:ident),* $(,)?) => {
        suite!(local, Local::new(), [$($module::$case),*]);
        suite!(linux, Linux(Local::new()), [$($module::$case),*]);
        suite!(remote, Remote(Local::new()), [$($module::$case),*]);
        suite!(virtual_fs, Virtual::new(), [$($module::$case),*]);
    };
}

both!(
    read::read_numbered_lines,
    read::read_windows_with_next_offset,
    read::read_stops_at_50_kib,
    read::read_cuts_long_lines,
    read::read_errors,
    read::read_binary_as_metadata,
    read::read_invalid_utf8_late_is_text,
    read::read_empty_file,
    write::write_creates_with_parents,
    write::write_needs_a_read_and_detects_staleness,
    write::write_keeps_mode_bits,
    write::write_refuses_directories,
    write::edit_replaces_once_and_returns_a_diff,
    write::edit_ambiguous_and_replace_all,
    write::edit_no_match_diagnoses_whitespace,
    write::edit_keeps_crlf,
    write::edit_stale_and_missing,
    write::edit_binary_is_refused,
    walks::glob_respects_ignores_and_sorts,
    walks::glob_caps_with_a_total,
    walks::list_files_recursive_and_filtered,
    walks::search_literal_regex_and_options,
    walks::search_context_lines,
    walks::search_caps_with_a_total,
    walks::changes_reports_added_modified_deleted,
    policy::protected_paths_are_read_only,
    policy::read_only_mode_offers_no_writes,
    policy::deny_lists_remove_tools,
    policy::deny_read_hides_paths,
    policy::secrets_never_leave,
    policy::unknown_tools_and_bad_arguments,
    view::view_file_shows_images_downscaled,
    view::view_file_shows_text_and_binary,
    view::view_file_reencodes_images_over_the_byte_limit,
    view::view_file_refuses_huge_headers_before_decoding,
    view::view_file_refuses_a_decode_bomb,
    view::view_file_budgets_a_progressive_jpegs_coefficients,
    view::view_file_shows_the_first_frame_of_animations,
    redaction::read_redacts_before_the_long_line_cut,
    redaction::view_file_redacts_before_the_long_line_cut,
    redaction::read_window_never_shows_part_of_a_multiline_secret,
    redaction::search_redacts_before_the_line_cut,
    redaction::echoed_input_is_redacted_before_its_cut,
    redaction::digests_of_redacted_files_confirm_no_guess,
    redaction::view_file_sends_no_image_metadata,
    redaction::edit_file_never_shows_part_of_a_multiline_secret,
    names::names_cannot_forge_lines_in_listings,
    names::names_cannot_forge_lines_in_changes,
    names::names_with_colons_cannot_forge_hits,
    names::error_messages_escape_names,
    names::contents_show_controls_as_pictures,
    walks::walks_say_what_is_too_deep,
    walks::ignore_files_are_bounded_and_skips_are_said,
    git::git_surface_is_read_only_for_the_tools,
    git::git_sequencer_state_is_read_only_for_the_tools,
    policy::other_agents_configs_are_read_only,
    policy::tool_configs_below_the_root_are_read_only,
    walks::changes_compares_what_the_baseline_saw_whatever_ignores_say,
    walks::changes_counts_what_new_ignore_files_hide,
    walks::changes_says_when_git_refs_move_or_the_index_hides_files,
    walks::changes_says_when_grafts_shallow_or_alternates_change,
    walks::changes_says_when_what_the_next_commit_takes_changes,
    walks::changes_skips_packed_refs_lines_that_name_no_ref,
    git::nested_git_dirs_are_not_made_by_the_tools,
    walks::changes_counts_what_appears_under_deny_read,
    walks::changes_says_when_a_repository_appears_below_the_root,
    walks::walks_bound_the_entries_of_one_directory,
);
