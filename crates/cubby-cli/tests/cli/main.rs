//! Black-box tests of the `cubby` binary: `call`, `tools`, config and flags,
//! the environment of commands, terminals, the placeholder stash. A module
//! per topic.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod calls;
mod config;
mod env;
mod mounts;
mod skills;
mod stash;
mod terminals;

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn cubby(root: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cubby"))
        .args(args)
        .arg("--root")
        .arg(root)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}
