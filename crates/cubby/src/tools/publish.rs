//! Artifacts in tool results (SPEC §5.1): publishing a file of the
//! sandbox, the line the model reads per artifact, its attachments (a link,
//! and the image when it is one within the limits), and the collection of
//! `$CUBBY_OUTPUT_DIR`.
//!
//! ```text
//! read_for_publishing     metadata → size ≤ 25 MB → read (bounded) →
//!                         no secret in name, bytes or the compressed streams
//!                         they hold (artifact::inflate)
//! collect(dir)            walk ≤ depth 4, regular files only (links, FIFOs,
//!                         devices listed as skipped) → each read so,
//!                         queued in one Batch → finish
//!                         (one flush for all bytes, one for all names)
//! attachments(published)  Artifact(FileRef) [+ Image, re-encoded as view_file does]
//! ```

use crate::artifact::{Artifacts, FileRef, Publish, Published};
use crate::error::{Error, ErrorKind, Result};
use crate::output::{Attachment, Redactor};
use crate::path::WorkspacePath;
use crate::sandbox::Metadata;
use crate::sandbox::{EntryKind, FileSystem};

/// The variable naming the run's output directory in every command.
pub const OUTPUT_DIR_ENV: &str = "CUBBY_OUTPUT_DIR";

/// Where the runs' output directories are, relative to the root:
/// `<OUTPUT_ROOT>/<run id>`.
pub const OUTPUT_ROOT: &str = ".cubby/output";

/// How deep the collection looks below the output directory (a file in
/// the directory itself is at depth 1).
pub const MAX_OUTPUT_DEPTH: usize = 4;

/// Most directory entries one collection looks at (past it, the rest are
/// not read: one line says so).
pub const MAX_OUTPUT_ENTRIES: usize = 20_000;

/// Most skipped files a result names one by one, in its text and its
/// structured output (the rest are counted).
pub const MAX_SKIPPED_NAMED: usize = 20;

/// Refuses a file tool's write beneath [`OUTPUT_ROOT`]: what is there is
/// published as the artifacts of the run whose directory it is, so only
/// that run's commands write there (R4-7: another session's `write_file`
/// planted a file in it).
///
/// # Errors
///
/// `denied` for a path beneath `.cubby/output`.
pub(crate) fn refuse_output_write(path: &WorkspacePath) -> Result<()> {
    match WorkspacePath::parse(OUTPUT_ROOT) {
        Ok(root) if path.starts_with(&root) => Err(Error::denied(format!(
            "`{path}` is in the runs' output directories, which only commands write (a command \
             leaves a file in $CUBBY_OUTPUT_DIR to publish it); write elsewhere"
        ))),
        _ => Ok(()),
    }
}

/// The line the model reads for an artifact: `artifact report.pdf —
/// application/pdf, 1.2 MB, sha256:ab12cd34…, cubby://artifacts/…, in the
/// sandbox at out/report.pdf`.
pub(crate) fn line(file: &FileRef) -> String {
    let mut line = format!(
        "artifact {} — {}, {}, sha256:{}…, {}",
        crate::path::escape_name(file.name.as_bytes()),
        file.media_type,
        human_size(file.size),
        &file.sha256[..12],
        file.uri
    );
    if let Some(path) = &file.path {
        line.push_str(", in the sandbox at ");
        line.push_str(path);
    }
    line
}

/// `1.2 MB`, `512 B` (decimal units, as the limits are stated).
fn human_size(n: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1_000_000_000, "GB"), (1_000_000, "MB"), (1_000, "kB")];
    for (unit, name) in UNITS {
        if n >= unit {
            #[allow(clippy::cast_precision_loss)]
            return format!("{:.1} {name}", n as f64 / unit as f64);
        }
    }
    format!("{n} B")
}

/// What a result carries for `published`: the artifact (a link), then the
/// image the model sees when it is a whole PNG, JPEG, GIF or WebP that
/// view_file's bounds can show (downscaled and re-encoded as there; never
/// SVG, HTML or XML, which `media` never marks as images).
pub(crate) fn attachments(artifacts: &Artifacts, published: &Published) -> Vec<Attachment> {
    let mut out = vec![Attachment::Artifact(published.file.clone())];
    if published.image
        && let Some(image) = image_of(artifacts, &published.file)
    {
        out.push(Attachment::Image(image));
    }
    out
}

fn image_of(artifacts: &Artifacts, file: &FileRef) -> Option<crate::output::ImageData> {
    let format = super::view::format_of(&file.media_type)?;
    let bytes = artifacts
        .read(file, crate::artifact::MAX_ARTIFACT_BYTES)
        .ok()?;
    let path = WorkspacePath::parse(file.path.as_deref().unwrap_or(&file.name)).ok()?;
    super::view::shown_image(&path, &bytes, format, &file.media_type)
        .ok()
        .map(|shown| shown.data)
}

/// The publication of the file at `path` of the sandbox under its own name
/// (or `name`), its `path` in the FileRef, and its bytes, read once.
///
/// # Errors
///
/// `limit` before reading when it is over the artifact limit; what the
/// file system says of a link, a special file or a directory;
/// `denied` when its name or bytes hold a registered secret, also inside
/// a compressed stream (an artifact leaves unredacted: nothing secret is
/// handed out), `limit` when those streams cannot be checked.
fn read_for_publishing(
    fs: &dyn FileSystem,
    redactor: &Redactor,
    path: &WorkspacePath,
    name: Option<&str>,
) -> Result<(Publish, Vec<u8>)> {
    let meta = fs.metadata(path)?;
    if meta.kind != EntryKind::File {
        return Err(Error::invalid_input(format!(
            "`{path}` is not a regular file; only regular files are published"
        )));
    }
    if meta.size > crate::artifact::MAX_ARTIFACT_BYTES {
        return Err(Error::new(
            ErrorKind::Limit,
            format!(
                "`{path}` is {} bytes, over the {}-byte limit of one artifact; publish a smaller file (compress or split it)",
                meta.size,
                crate::artifact::MAX_ARTIFACT_BYTES
            ),
        ));
    }
    let name = match name {
        Some(n) => n.to_string(),
        None => path
            .as_path()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    };
    if redactor.finds(name.as_bytes()) {
        return Err(Error::denied(format!(
            "the name of `{path}` holds a secret's value; artifacts are not redacted, so it is not published"
        )));
    }
    // Read once, bounded: the bytes checked are the bytes stored and hashed
    // (a file rewritten meanwhile is stored as read, or refused when it grew).
    let bytes = fs.read_to_vec(path, crate::artifact::MAX_ARTIFACT_BYTES)?;
    // In its bytes, or inside a compressed stream of them (R4-1).
    crate::artifact::inflate::refuse_secret(redactor, &format!("`{path}`"), &bytes)?;
    Ok((
        Publish {
            name,
            media_type: None,
            path: Some(path.display()),
        },
        bytes,
    ))
}

/// What one collection of an output directory found.
#[derive(Debug, Default)]
pub(crate) struct Collected {
    /// New artifacts, in the order found.
    pub published: Vec<Published>,
    /// Files already published with these bytes under this name.
    pub known: usize,
    /// What was not published: the path and why, the first
    /// [`MAX_SKIPPED_NAMED`] only (R4-5: 200,000 entries made a 58 MB
    /// result).
    pub skipped: Vec<(String, String)>,
    /// How many more were not published, and how many of them for `limit`.
    pub skipped_more: usize,
    skipped_more_limits: usize,
    /// The walk stopped early: at [`MAX_OUTPUT_ENTRIES`] or after the run's
    /// collection time ([`crate::artifact::MAX_COLLECT_TIME`] by default; what it did not
    /// look at is not counted).
    pub stopped: Option<String>,
}

impl Collected {
    /// Records that `path` was not published, and why.
    fn skip(&mut self, path: String, why: String) {
        if self.skipped.len() < MAX_SKIPPED_NAMED {
            self.skipped.push((path, why));
        } else {
            self.skipped_more += 1;
            if why.starts_with("limit") {
                self.skipped_more_limits += 1;
            }
        }
    }

    /// True when nothing was published nor skipped.
    pub(crate) fn is_empty(&self) -> bool {
        self.published.is_empty() && self.skipped.is_empty() && self.stopped.is_none()
    }

    /// What was skipped, each as `path: why`, then one line for the rest.
    pub(crate) fn skipped_lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .skipped
            .iter()
            .map(|(path, why)| format!("{path}: {why}"))
            .collect();
        if self.skipped_more > 0 {
            lines.push(format!(
                "{} more file(s) ({} of them for `limit`)",
                self.skipped_more, self.skipped_more_limits
            ));
        }
        if let Some(why) = &self.stopped {
            lines.push(why.clone());
        }
        lines
    }

    /// The lines of the result: one per new artifact, then what was skipped
    /// (the first [`MAX_SKIPPED_NAMED`] named, the rest counted).
    pub(crate) fn render(&self) -> String {
        let mut text = String::new();
        for p in &self.published {
            text.push('\n');
            text.push_str(&line(&p.file));
        }
        for line in self.skipped_lines() {
            text.push_str(&format!("\nskipped {line}"));
        }
        text
    }
}

/// What says a file did not change: inode, size, mtime and ctime (which
/// every write moves, and no one can set).
pub(crate) type Stamp = (u64, u64, i128, i128);

fn stamp(m: &Metadata) -> Stamp {
    (m.ino, m.size, m.mtime_ns, m.ctime_ns)
}

/// Collects the output directory `dir`: every regular file at most
/// [`MAX_OUTPUT_DEPTH`] deep is published (once per name and bytes);
/// links, FIFOs, sockets and devices are skipped unopened and listed. The
/// files are published as one [`crate::artifact::Batch`]: made durable
/// together at the end, not with two `fsync`s each. A file an earlier
/// collection of the run read, unchanged since (its [`Stamp`]), is not
/// read again: it counts as known.
pub(crate) fn collect(
    fs: &dyn FileSystem,
    redactor: &Redactor,
    run: &super::RunState,
    dir: &WorkspacePath,
) -> Collected {
    let started = std::time::Instant::now();
    let artifacts = run.artifacts();
    let collect_time = artifacts.budget().collect_time;
    let mut seen_before = crate::sync::lock(&run.collected);
    let mut refused = crate::sync::lock(&run.refused);
    let mut found = Collected::default();
    let mut batch = artifacts.batch();
    // The path and stamp of each queued publication, in order.
    let mut queued: Vec<(WorkspacePath, Option<Stamp>)> = Vec::new();
    let mut seen = 0usize;
    let mut stack = vec![(dir.clone(), 1usize)];
    'walk: while let Some((at, depth)) = stack.pop() {
        // No more entries are read than the walk may still look at.
        let Ok((mut entries, more)) = fs.read_dir_bounded(&at, MAX_OUTPUT_ENTRIES - seen) else {
            continue;
        };
        // In name order, whatever order the file system lists them in: a
        // collection's artifacts are numbered, listed and skipped the same
        // way each time.
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        seen += entries.len();
        if more {
            found.stopped = Some(format!(
                "the rest: limit: one collection looks at {MAX_OUTPUT_ENTRIES} entries (move \
                 files out of $CUBBY_OUTPUT_DIR, or archive them as one)"
            ));
        }
        for entry in entries {
            if started.elapsed() > collect_time {
                found.stopped = Some(format!(
                    "the rest: limit: one collection takes at most {} s; what is left is \
                     collected by the next run",
                    collect_time.as_secs()
                ));
                break 'walk;
            }
            let path = at.join_name(&entry.name);
            let shown = path.display();
            match entry.kind {
                EntryKind::Dir if depth < MAX_OUTPUT_DEPTH => stack.push((path, depth + 1)),
                EntryKind::Dir => found.skip(
                    shown,
                    format!("a directory deeper than {MAX_OUTPUT_DEPTH} levels"),
                ),
                EntryKind::Symlink => found.skip(shown, "a symbolic link (never followed)".into()),
                EntryKind::Special => {
                    found.skip(shown, "a FIFO, socket or device (never opened)".into());
                }
                EntryKind::File
                    if artifacts.slots_taken() >= crate::artifact::MAX_RUN_ARTIFACTS =>
                {
                    found.skip(
                        shown,
                        format!(
                            "limit: this run holds {} artifacts, the most it may",
                            crate::artifact::MAX_RUN_ARTIFACTS
                        ),
                    );
                }
                EntryKind::File => {
                    // Taken before the read: a change during it shows next time.
                    let Ok(meta) = fs.metadata(&path) else {
                        continue;
                    };
                    let before = stamp(&meta);
                    if seen_before.get(&path) == Some(&before) {
                        found.known += 1;
                        continue;
                    }
                    // Refused before for what its bytes hold, unchanged since.
                    if let Some((at_stamp, why)) = refused.get(&path)
                        && *at_stamp == before
                    {
                        found.skip(shown, why.clone());
                        continue;
                    }
                    // Over what the run can still take: refused unread (R4-5:
                    // each file was read whole before the budget refused it).
                    let (taken, _) = artifacts.usage();
                    if meta.size <= crate::artifact::MAX_ARTIFACT_BYTES
                        && taken + meta.size > crate::artifact::MAX_RUN_BYTES
                    {
                        found.skip(
                            shown,
                            format!(
                                "limit: {} bytes do not fit in this run's artifact budget: {taken} of {} bytes are taken; publish less",
                                meta.size,
                                crate::artifact::MAX_RUN_BYTES
                            ),
                        );
                        continue;
                    }
                    let read = read_for_publishing(fs, redactor, &path, None);
                    let queue = match read {
                        Ok((request, bytes)) => batch.publish_bytes(&request, &bytes),
                        Err(e) => {
                            let why = format!("{}: {}", e.kind().as_str(), e.message());
                            refused.insert(path.clone(), (before, why));
                            Err(e)
                        }
                    };
                    match queue {
                        Ok(()) => queued.push((path, Some(before))),
                        Err(e) => {
                            found.skip(shown, format!("{}: {}", e.kind().as_str(), e.message()));
                        }
                    }
                }
            }
        }
    }
    for ((path, before), published) in queued.into_iter().zip(batch.finish()) {
        match published {
            Ok(p) => {
                if let Some(before) = before {
                    seen_before.insert(path, before);
                }
                if p.new {
                    found.published.push(p);
                } else {
                    found.known += 1;
                }
            }
            Err(e) => found.skip(
                path.display(),
                format!("{}: {}", e.kind().as_str(), e.message()),
            ),
        }
    }
    found
}

/// Removes the output directory `dir` and the empty directories above it
/// up to the root when nothing is in them (no trace in a workspace whose
/// commands wrote nothing there); a process still writing there keeps it.
/// True when `dir` itself was removed.
pub(crate) fn tidy(fs: &dyn FileSystem, dir: &WorkspacePath) -> bool {
    let mut at = dir.clone();
    let mut removed = false;
    while !at.is_root() {
        if !matches!(fs.remove_empty_dir(&at), Ok(true)) {
            break;
        }
        removed = true;
        at = at.parent();
    }
    removed
}
