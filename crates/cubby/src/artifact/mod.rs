//! Artifacts: files out of the sandbox (SPEC §5.1).
//!
//! A file a tool publishes — or a command leaves in `$CUBBY_OUTPUT_DIR` —
//! goes into a content-addressed [`Store`] on the host and comes back as a
//! [`FileRef`]. The store is shared (by every run, and by every cubby
//! process that uses the same state directory); what belongs to a run —
//! its names, its budget, the list a client pages through — is the run's
//! [`Artifacts`].
//!
//! The budget is reserved before any byte is written: a publication states
//! its size, takes that much of the run's bytes and one of its slots under a
//! lock, and only then copies; parallel publications share the budget and
//! cannot overshoot it. Bytes the run already holds (the same digest under
//! any name) give their reservation back: unique bytes count once.
//!
//! ```text
//! publish(name, type?, size, reader)
//!   check_name ─ NFC, one component, no controls (name.rs)
//!   reserve    ─ size ≤ 25 MB, run total ≤ 100 MB, count ≤ 1,000 (under the lock)
//!   Store::put ─ temp file, hash while writing, fsync, rename (store.rs)
//!   decide     ─ media type against the signature (media.rs)
//!   commit     ─ same name + same bytes: the earlier FileRef; name taken: `name (2).ext`
//! ```

pub mod inflate;
pub mod media;
pub mod name;
pub mod store;

use std::collections::HashSet;
use std::io::Read;
use std::sync::{Arc, Mutex, MutexGuard};

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

pub use crate::output::FileRef;
pub use store::Store;

use crate::error::{Error, ErrorKind, Result};

/// The largest artifact, in bytes (25 MB).
pub const MAX_ARTIFACT_BYTES: u64 = 25_000_000;
/// The most bytes a run's artifacts hold, unique bytes counted once (100 MB).
pub const MAX_RUN_BYTES: u64 = 100_000_000;
/// The most artifacts a run holds.
pub const MAX_RUN_ARTIFACTS: usize = 1_000;
/// The longest one collection of a run's output directory walks and reads;
/// what it did not reach is collected by the next (R4-5: 400 sparse files
/// cost 21–26 s a run).
pub const MAX_COLLECT_TIME: std::time::Duration = std::time::Duration::from_secs(10);

/// The temporary directory of `host` (`$TMPDIR` when absolute, else
/// `/tmp`): where a store of its own ([`Store::private`]) is made when no
/// `state_dir` is configured.
pub fn temp_dir(host: &crate::host_env::HostEnv) -> std::path::PathBuf {
    host.var_os("TMPDIR")
        .filter(|t| std::path::Path::new(t).is_absolute())
        .map_or_else(
            || std::path::PathBuf::from("/tmp"),
            std::path::PathBuf::from,
        )
}

/// The scheme and authority of artifact URIs.
pub const URI_PREFIX: &str = "cubby://artifacts/";

/// What a name keeps unencoded in a URI: RFC 3986's unreserved characters.
const NAME_IN_URI: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The URI of the artifact `name` with digest `sha256`.
pub fn uri_of(sha256: &str, name: &str) -> String {
    format!(
        "{URI_PREFIX}{sha256}/{}",
        utf8_percent_encode(name, NAME_IN_URI)
    )
}

/// The digest and name an artifact URI names.
///
/// # Errors
///
/// `invalid_input` when `uri` is not `cubby://artifacts/<sha256>/<name>`
/// with a valid digest and name.
pub fn parse_uri(uri: &str) -> Result<(String, String)> {
    let bad = |why: &str| {
        Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "{why}: an artifact URI is {URI_PREFIX}<sha256>/<name>, as resources/list gives it"
            ),
        ))
    };
    let Some(rest) = uri.strip_prefix(URI_PREFIX) else {
        return bad("not an artifact URI");
    };
    let Some((sha256, encoded)) = rest.split_once('/') else {
        return bad("no name in the URI");
    };
    if !store::is_digest(sha256) {
        return bad("the digest is not 64 lower-case hex digits");
    }
    let Ok(decoded) = percent_decode_str(encoded).decode_utf8() else {
        return bad("the name is not UTF-8");
    };
    let name = name::check_name(&decoded)?;
    if name != decoded {
        return bad("the name is not in NFC");
    }
    Ok((sha256.to_string(), name))
}

/// The limits of one run's artifacts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// The largest artifact, in bytes.
    pub file_bytes: u64,
    /// The most bytes in all, unique bytes counted once.
    pub run_bytes: u64,
    /// The most artifacts.
    pub count: usize,
    /// The longest one collection of the output directory takes.
    pub collect_time: std::time::Duration,
}

impl Default for Budget {
    fn default() -> Budget {
        Budget {
            file_bytes: MAX_ARTIFACT_BYTES,
            run_bytes: MAX_RUN_BYTES,
            count: MAX_RUN_ARTIFACTS,
            collect_time: MAX_COLLECT_TIME,
        }
    }
}

/// A publication: a file's name, its declared media type (detected when
/// none), and where it is in the sandbox (when it is).
#[derive(Clone, Debug, Default)]
pub struct Publish {
    /// The name (checked and put in NFC).
    pub name: String,
    /// The declared media type.
    pub media_type: Option<String>,
    /// Where the bytes are in the sandbox.
    pub path: Option<String>,
}

/// What [`Artifacts::publish`] made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    /// The artifact.
    pub file: FileRef,
    /// True when it is a whole PNG, JPEG, GIF or WebP image (may be shown).
    pub image: bool,
    /// False when the run held this name with these bytes already.
    pub new: bool,
}

#[derive(Debug, Default)]
struct Ledger {
    /// Bytes reserved: the run's unique bytes plus publications in flight.
    reserved: u64,
    /// Publications in flight (each holds a slot).
    pending: usize,
    /// The run's artifacts, oldest first, with whether each is an image.
    files: Vec<(FileRef, bool)>,
    /// Digests the run holds (their bytes counted once).
    digests: HashSet<String>,
    /// Names in use.
    names: HashSet<String>,
}

/// One run's artifacts: names, budget, list (SPEC §5.1).
#[derive(Debug)]
pub struct Artifacts {
    store: Arc<Store>,
    budget: Budget,
    ledger: Mutex<Ledger>,
}

impl Artifacts {
    /// A run with no artifacts yet, over `store`.
    pub fn new(store: Arc<Store>, budget: Budget) -> Artifacts {
        Artifacts {
            store,
            budget,
            ledger: Mutex::new(Ledger::default()),
        }
    }

    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        self.ledger
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The run's limits.
    pub fn budget(&self) -> Budget {
        self.budget
    }

    /// The store the run writes to.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Publishes `size` bytes read from `reader`.
    ///
    /// # Errors
    ///
    /// `invalid_input` for a bad name or a declared type the bytes do not
    /// have; `limit` when the artifact is over the file limit, the run's
    /// bytes or count would be exceeded, or `reader` gives more than `size`
    /// bytes; `internal` when the store fails. Nothing is kept on error.
    pub fn publish(
        &self,
        request: &Publish,
        size: u64,
        reader: &mut dyn Read,
    ) -> Result<Published> {
        let name = name::check_name(&request.name)?;
        if let Some(t) = &request.media_type {
            media::normalize(t)?;
        }
        self.reserve(&name, size)?;
        let stored = match self.store.put(reader, size) {
            Ok(s) => s,
            Err(e) => {
                self.release(size);
                return Err(e);
            }
        };
        let decided = match media::decide(
            request.media_type.as_deref(),
            &name,
            &stored.head,
            &stored.tail,
            stored.size,
        ) {
            Ok(d) => d,
            Err(e) => {
                self.release(size);
                return Err(e);
            }
        };
        Ok(self.commit(name, size, &stored, decided, request.path.clone()))
    }

    /// Publishes `bytes`.
    ///
    /// # Errors
    ///
    /// As [`Artifacts::publish`].
    pub fn publish_bytes(&self, request: &Publish, bytes: &[u8]) -> Result<Published> {
        self.publish(request, bytes.len() as u64, &mut &bytes[..])
    }

    /// Takes `size` bytes and a slot of the run's budget.
    fn reserve(&self, name: &str, size: u64) -> Result<()> {
        let budget = self.budget;
        if size > budget.file_bytes {
            return Err(Error::new(
                ErrorKind::Limit,
                format!(
                    "artifact {} is {size} bytes, over the {}-byte limit of one artifact; publish a smaller file (compress or split it)",
                    crate::path::escape_name(name.as_bytes()),
                    budget.file_bytes
                ),
            ));
        }
        let mut ledger = self.ledger();
        if ledger.files.len() + ledger.pending >= budget.count {
            return Err(Error::new(
                ErrorKind::Limit,
                format!(
                    "this run holds {} artifacts, the most it may; publish fewer files (an archive of them counts as one)",
                    budget.count
                ),
            ));
        }
        if ledger.reserved + size > budget.run_bytes {
            return Err(Error::new(
                ErrorKind::Limit,
                format!(
                    "artifact {} ({size} bytes) does not fit in this run's artifact budget: {} of {} bytes are taken; publish less",
                    crate::path::escape_name(name.as_bytes()),
                    ledger.reserved,
                    budget.run_bytes
                ),
            ));
        }
        ledger.reserved += size;
        ledger.pending += 1;
        Ok(())
    }

    /// Gives back a reservation that stored nothing.
    fn release(&self, size: u64) {
        let mut ledger = self.ledger();
        ledger.reserved -= size;
        ledger.pending -= 1;
    }

    /// Records a stored publication: its reservation becomes its unique
    /// bytes (or is given back when the run holds the digest already).
    fn commit(
        &self,
        name: String,
        reserved: u64,
        stored: &store::Stored,
        decided: media::Decided,
        path: Option<String>,
    ) -> Published {
        let mut ledger = self.ledger();
        ledger.pending -= 1;
        let known = ledger.digests.contains(&stored.sha256);
        // The reservation becomes the bytes' share: none when the run holds
        // them already.
        ledger.reserved =
            ledger.reserved.saturating_sub(reserved) + if known { 0 } else { stored.size };
        if let Some((file, image)) = ledger
            .files
            .iter()
            .find(|(f, _)| f.name == name && f.sha256 == stored.sha256)
        {
            return Published {
                file: file.clone(),
                image: *image,
                new: false,
            };
        }
        let mut unique = name.clone();
        let mut n = 2;
        while ledger.names.contains(&unique) {
            unique = name::numbered(&name, n);
            n += 1;
        }
        let file = FileRef {
            uri: uri_of(&stored.sha256, &unique),
            sha256: stored.sha256.clone(),
            name: unique.clone(),
            media_type: decided.media_type,
            size: stored.size,
            path,
        };
        ledger.names.insert(unique);
        ledger.digests.insert(stored.sha256.clone());
        ledger.files.push((file.clone(), decided.image));
        Published {
            file,
            image: decided.image,
            new: true,
        }
    }

    /// The run's artifacts, newest first.
    pub fn list(&self) -> Vec<FileRef> {
        self.ledger()
            .files
            .iter()
            .rev()
            .map(|(f, _)| f.clone())
            .collect()
    }

    /// Artifacts of the run and publications in flight: the slots taken.
    pub fn slots_taken(&self) -> usize {
        let ledger = self.ledger();
        ledger.files.len() + ledger.pending
    }

    /// Publications made together, made durable at once (see [`Batch`]).
    pub fn batch(&self) -> Batch<'_> {
        Batch {
            artifacts: self,
            items: Vec::new(),
        }
    }

    /// Bytes the run's artifacts hold (unique bytes once) and how many.
    pub fn usage(&self) -> (u64, usize) {
        let ledger = self.ledger();
        (ledger.reserved, ledger.files.len())
    }

    /// The run's artifact that `uri` names.
    ///
    /// # Errors
    ///
    /// `invalid_input` for a malformed URI; `not_found` for a digest or name
    /// this run did not publish (another run's artifact included).
    pub fn resolve(&self, uri: &str) -> Result<FileRef> {
        let (sha256, name) = parse_uri(uri)?;
        self.ledger()
            .files
            .iter()
            .find(|(f, _)| f.sha256 == sha256 && f.name == name)
            .map(|(f, _)| f.clone())
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::NotFound,
                    format!("{uri} is not an artifact of this run; resources/list gives this run's artifacts"),
                )
            })
    }

    /// The bytes of `file`, a FileRef of this run, when they are at most
    /// `max` bytes.
    ///
    /// # Errors
    ///
    /// `too_large` naming the size and the limit; `not_found` when the store
    /// lost the blob.
    pub fn read(&self, file: &FileRef, max: u64) -> Result<Vec<u8>> {
        if file.size > max {
            return Err(Error::new(
                ErrorKind::TooLarge,
                format!(
                    "artifact {} is {} bytes, over the {max}-byte limit of one read; its bytes are in the sandbox{}",
                    crate::path::escape_name(file.name.as_bytes()),
                    file.size,
                    file.path
                        .as_deref()
                        .map(|p| format!(" at {p}"))
                        .unwrap_or_default()
                ),
            ));
        }
        let mut blob = self.store.open_blob(&file.sha256)?;
        let mut bytes = Vec::with_capacity(usize::try_from(file.size).unwrap_or(0));
        (&mut blob)
            .take(max + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| {
                Error::new(
                    ErrorKind::Internal,
                    format!("artifact store: cannot read a blob: {e}"),
                )
            })?;
        Ok(bytes)
    }
}

/// One publication of a [`Batch`], stored but not yet durable.
struct Queued {
    name: String,
    /// What it holds of the run's budget.
    reserved: u64,
    staged: store::Staged,
    decided: media::Decided,
    path: Option<String>,
}

/// Publications made together (the collection of an output directory):
/// each is checked, reserved and copied into a temporary file of the store
/// as it comes ([`Batch::publish_bytes`]); [`Batch::finish`] makes them all
/// durable at once ([`Store::settle_all`]: one flush of the file system for
/// the bytes, one for the names, instead of two `fsync`s a file) and only
/// then records them in the run, in order. Dropped unfinished, it gives
/// back what it reserved and keeps nothing.
pub struct Batch<'a> {
    artifacts: &'a Artifacts,
    items: Vec<Queued>,
}

impl Batch<'_> {
    /// Queues `bytes` under `request`.
    ///
    /// # Errors
    ///
    /// As [`Artifacts::publish`]; nothing is queued on error.
    pub fn publish_bytes(&mut self, request: &Publish, bytes: &[u8]) -> Result<()> {
        let artifacts = self.artifacts;
        let name = name::check_name(&request.name)?;
        if let Some(t) = &request.media_type {
            media::normalize(t)?;
        }
        let size = bytes.len() as u64;
        artifacts.reserve(&name, size)?;
        let staged = match artifacts.store.stage(&mut &bytes[..], size) {
            Ok(s) => s,
            Err(e) => {
                artifacts.release(size);
                return Err(e);
            }
        };
        let stored = staged.stored();
        let decided = match media::decide(
            request.media_type.as_deref(),
            &name,
            &stored.head,
            &stored.tail,
            stored.size,
        ) {
            Ok(d) => d,
            Err(e) => {
                artifacts.release(size);
                return Err(e);
            }
        };
        // Bytes the run or the batch holds already count once: their
        // reservation goes back now, not at the end.
        let mut reserved = size;
        let sha = &stored.sha256;
        if self.items.iter().any(|q| &q.staged.stored().sha256 == sha)
            || artifacts.ledger().digests.contains(sha)
        {
            artifacts.ledger().reserved -= size;
            reserved = 0;
        }
        self.items.push(Queued {
            name,
            reserved,
            staged,
            decided,
            path: request.path.clone(),
        });
        Ok(())
    }

    /// How many publications are queued.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when none is queued.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Makes the queued publications durable and records them in the run,
    /// in the order they were queued; one result each (`internal` when the
    /// store could not make it durable: then it is not recorded).
    pub fn finish(mut self) -> Vec<Result<Published>> {
        let items = std::mem::take(&mut self.items);
        let mut meta = Vec::with_capacity(items.len());
        let mut staged = Vec::with_capacity(items.len());
        for q in items {
            meta.push((q.name, q.reserved, q.decided, q.path));
            staged.push(q.staged);
        }
        let settled = self.artifacts.store.settle_all(staged);
        meta.into_iter()
            .zip(settled)
            .map(|((name, reserved, decided, path), stored)| match stored {
                Ok(stored) => Ok(self
                    .artifacts
                    .commit(name, reserved, &stored, decided, path)),
                Err(e) => {
                    self.artifacts.release(reserved);
                    Err(e)
                }
            })
            .collect()
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        for q in self.items.drain(..) {
            self.artifacts.release(q.reserved);
        }
    }
}

#[cfg(test)]
mod tests;
