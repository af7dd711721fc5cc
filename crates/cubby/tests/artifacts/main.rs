//! Artifacts wired to the runs (SPEC §5.1): the per-run store, tool
//! results, `$CUBBY_OUTPUT_DIR`, `view_file`, seeding a run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod compressed;
mod output;
mod store;

use std::path::PathBuf;
use std::sync::Arc;

use cubby::artifact::Store;
use cubby::{Toolset, local_sandbox};
use serde_json::{Value, json};

/// The collection time of [`Run::unhurried_toolset`].
const UNHURRIED: std::time::Duration = std::time::Duration::from_secs(3600);

/// A workspace on `local` and a state directory beside it.
pub struct Run {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
    pub state: PathBuf,
    pub store: Arc<Store>,
}

impl Default for Run {
    fn default() -> Run {
        Run::new()
    }
}

impl Run {
    pub fn new() -> Run {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let root = root.canonicalize().unwrap();
        let state = dir.path().join("state");
        let store = Arc::new(Store::lazy(&state.join("artifacts")));
        Run {
            _dir: dir,
            root,
            state,
            store,
        }
    }

    /// A toolset (a run) over the workspace, with `secret` registered.
    pub fn toolset(&self) -> Toolset {
        self.toolset_with(cubby::artifact::Budget::default())
    }

    /// [`Run::toolset`] with the artifact limits `budget`.
    pub fn toolset_with(&self, budget: cubby::artifact::Budget) -> Toolset {
        Toolset::builder(local_sandbox(&self.root).unwrap())
            .track_changes(false)
            .artifact_store(self.store.clone())
            .artifact_budget(budget)
            .secret("CUBBY_TEST_TOKEN", "tok-5150-zyxw")
            .build()
            .unwrap()
    }

    /// [`Run::toolset`] whose collections have all the time they take: for
    /// tests of the other limits, which a busy machine would otherwise
    /// cut short at [`cubby::artifact::MAX_COLLECT_TIME`].
    pub fn unhurried_toolset(&self) -> Toolset {
        self.toolset_with(cubby::artifact::Budget {
            collect_time: UNHURRIED,
            ..cubby::artifact::Budget::default()
        })
    }

    pub fn put(&self, rel: &str, bytes: &[u8]) {
        let path = self.root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }

    /// The bytes of a stored blob.
    pub fn blob(&self, sha: &str) -> Vec<u8> {
        std::fs::read(
            self.state
                .join("artifacts/sha256")
                .join(&sha[..2])
                .join(sha),
        )
        .unwrap()
    }
}

pub fn ok(t: &Toolset, tool: &str, args: Value) -> cubby::ToolOutput {
    let out = t.call(tool, args);
    assert!(!out.is_error, "{tool}: {}", out.text);
    out
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub fn png(width: u32, height: u32) -> Vec<u8> {
    let img = image::RgbImage::from_fn(width, height, |x, y| {
        image::Rgb([(x % 256) as u8, (y % 256) as u8, 7])
    });
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png).unwrap();
    out.into_inner()
}
