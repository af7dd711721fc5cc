//! The content-addressed store on disk (SPEC §5.1):
//! `<dir>/sha256/<first two hex digits>/<64 hex digits>`.
//!
//! Bytes are written to a temporary file of this process under `<dir>/tmp`
//! while they are hashed, then `fsync`ed and renamed to their digest's name,
//! and the directory is `fsync`ed: a crash leaves either nothing or the whole
//! blob, never a torn one under a digest's name. Equal bytes are stored
//! once. The store holds no names, types or runs: those are the run's
//! ([`super::Artifacts`]); several runs, and several cubby processes, may
//! share one store.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

use super::media::{HEAD_BYTES, TAIL_BYTES};
use crate::error::{Error, ErrorKind, Result};

/// Bytes read and written at a time.
const CHUNK_BYTES: usize = 64 * 1024;

/// Temporary files of this process: `<pid>.<n>`.
static NEXT_TEMP: AtomicU64 = AtomicU64::new(0);

/// What [`Store::put`] stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// Lower-case hex sha256 of the bytes.
    pub sha256: String,
    /// How many bytes.
    pub size: u64,
    /// The first [`HEAD_BYTES`] bytes (for the media type).
    pub head: Vec<u8>,
    /// The last [`TAIL_BYTES`] bytes (where an image ends).
    pub tail: Vec<u8>,
}

/// Random bytes in the name of a private store's directory.
const PRIVATE_RANDOM_BYTES: usize = 8;

/// Attempts at a private directory whose name is free.
const PRIVATE_TRIES: usize = 8;

/// Where a private store (one run's) is made in the temporary directory:
/// `cubby-run-<pid>-<random>`.
const PRIVATE_PREFIX: &str = "cubby-run-";

/// How a store's directory is had.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A directory the user chose (`state_dir`): refused when another
    /// user's, with an error that says what to do.
    Chosen,
    /// The default state directory in a shared temporary directory: when
    /// another user holds it (squatted), a private one instead.
    Default,
    /// One run's, made fresh and removed when dropped.
    Private,
}

/// A content-addressed store in a directory of the host.
#[derive(Debug)]
pub struct Store {
    /// The directory asked for (for a private store: the temporary
    /// directory it is made in).
    dir: PathBuf,
    /// Made once, at the first write (or at [`Store::open`]): the
    /// directory the store is in — its directories exist, are the user's,
    /// not links and not writable by others; `Err` holds why not.
    ready: OnceLock<std::result::Result<Made, String>>,
    kind: Kind,
}

#[derive(Clone, Debug)]
struct Made {
    dir: PathBuf,
    /// Removed with everything in it when the store is dropped.
    private: bool,
}

impl Drop for Store {
    fn drop(&mut self) {
        if let Some(Ok(made)) = self.ready.get()
            && made.private
        {
            let _ = fs::remove_dir_all(&made.dir);
        }
    }
}

fn internal(what: &str, path: &Path, e: &std::io::Error) -> Error {
    Error::new(
        ErrorKind::Internal,
        format!("artifact store: cannot {what} {}: {e}", path.display()),
    )
}

/// True when `s` is 64 lower-case hex digits.
pub fn is_digest(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// `n` random bytes from `/dev/urandom`, in hex.
pub(crate) fn random_hex(n: usize) -> std::io::Result<String> {
    let mut random = vec![0u8; n];
    File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut random))?;
    Ok(random.iter().map(|b| format!("{b:02x}")).collect())
}

/// Why `path` is not a directory this user may keep a store in: not a
/// directory (a link included), another user's, or writable by others.
fn not_owned(path: &Path, meta: &fs::Metadata) -> Option<String> {
    use std::os::unix::fs::MetadataExt as _;
    let uid = rustix::process::getuid().as_raw();
    if !meta.file_type().is_dir() {
        return Some(format!(
            "{} is not a directory (a link or a file)",
            path.display()
        ));
    }
    if meta.uid() != uid {
        return Some(format!(
            "{} belongs to uid {}, not to this user (uid {uid})",
            path.display(),
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Some(format!(
            "{} is writable by other users (mode {:o})",
            path.display(),
            meta.mode() & 0o7777
        ));
    }
    None
}

/// Makes `path` (mode 0700, only it: its parent must exist) or takes the
/// one there when it is this user's own: `Ok(None)`; `Ok(Some(why))` when
/// it exists and is not (nothing is made in it).
fn own_dir(path: &Path) -> std::result::Result<Option<String>, String> {
    match fs::DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(internal("create", path, &e).message().to_string()),
    }
    let meta = fs::symlink_metadata(path)
        .map_err(|e| internal("inspect", path, &e).message().to_string())?;
    Ok(not_owned(path, &meta))
}

/// Makes a new directory `<prefix><pid>-<random>` in `tmp`, mode 0700,
/// that no one had before (a name taken is passed over), after removing
/// the ones of this user whose process is gone (a process that exited
/// without dropping its store left them).
fn fresh_dir(tmp: &Path, prefix: &str) -> std::result::Result<PathBuf, String> {
    sweep_dead(tmp, prefix);
    for _ in 0..PRIVATE_TRIES {
        let random = random_hex(PRIVATE_RANDOM_BYTES)
            .map_err(|e| format!("artifact store: no random bytes: {e}"))?;
        let dir = tmp.join(format!("{prefix}{}-{random}", std::process::id()));
        match fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(internal("create", &dir, &e).message().to_string()),
        }
    }
    Err(format!(
        "artifact store: no free name for a private store in {} after {PRIVATE_TRIES} tries",
        tmp.display()
    ))
}

/// Removes the directories `<prefix><pid>-…` in `tmp` that are this user's
/// and whose process is gone.
fn sweep_dead(tmp: &Path, prefix: &str) {
    let Ok(entries) = fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let pid = name
            .to_str()
            .and_then(|n| n.strip_prefix(prefix))
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<i32>().ok());
        let Some(pid) = pid else {
            continue;
        };
        if pid_alive(pid) {
            continue;
        }
        let path = entry.path();
        if fs::symlink_metadata(&path).is_ok_and(|m| not_owned(&path, &m).is_none()) {
            let _ = fs::remove_dir_all(&path);
        }
    }
}

fn pid_alive(pid: i32) -> bool {
    rustix::process::Pid::from_raw(pid)
        .is_some_and(|p| rustix::process::test_kill_process(p).is_ok())
}

impl Store {
    /// Opens (creating it, mode 0700) the store in `dir`, and removes the
    /// temporary files that processes no longer running left there.
    ///
    /// # Errors
    ///
    /// `internal` when the directories cannot be made, or are another
    /// user's or writable by others.
    pub fn open(dir: &Path) -> Result<Store> {
        let store = Store::lazy(dir);
        store.ready()?;
        Ok(store)
    }

    /// The store in `dir`, made (as [`Store::open`] does) only when the
    /// first bytes are stored: a run that publishes nothing leaves nothing
    /// on disk.
    pub fn lazy(dir: &Path) -> Store {
        Store {
            dir: dir.to_path_buf(),
            ready: OnceLock::new(),
            kind: Kind::Chosen,
        }
    }

    /// [`Store::lazy`] for the default state directory's store
    /// (`<tmp>/cubby-state-<uid>/artifacts`): when another user holds that
    /// directory (it is theirs, or writable by others — squatted in a
    /// shared `/tmp`), the store is a private one instead
    /// (`<tmp>/cubby-state-<uid>-<pid>-<random>`, removed when dropped), and
    /// a warning names the directory to remove. Nothing is made inside a
    /// directory that is not the user's.
    pub fn lazy_default(dir: &Path) -> Store {
        Store {
            dir: dir.to_path_buf(),
            ready: OnceLock::new(),
            kind: Kind::Default,
        }
    }

    /// A store of its own for one run, in `tmp`
    /// (`cubby-run-<pid>-<random>`, a name no one had): made at the first
    /// write, removed with everything in it when the store is dropped (the
    /// run ends). Only the store's directory must be the user's (`tmp` is
    /// shared); those of this user's processes that are gone are removed
    /// when another is made.
    pub fn private(tmp: &Path) -> Store {
        Store {
            dir: tmp.to_path_buf(),
            ready: OnceLock::new(),
            kind: Kind::Private,
        }
    }

    /// The directory the store is in (for a private store not yet made:
    /// the directory it will be made in).
    pub fn dir(&self) -> &Path {
        match self.ready.get() {
            Some(Ok(made)) => &made.dir,
            _ => &self.dir,
        }
    }

    /// Makes the directories once (mode 0700), refusing a store directory
    /// or a parent of it that is a link, another user's or writable by
    /// others — before anything is made inside it — and sweeps.
    fn ready(&self) -> Result<&Path> {
        let made = self.ready.get_or_init(|| {
            let made = self.make()?;
            let dir = &made.dir;
            fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
                .map_err(|e| internal("set the mode of", dir, &e).message().to_string())?;
            for sub in ["sha256", "tmp"] {
                let path = dir.join(sub);
                match own_dir(&path)? {
                    None => {}
                    Some(why) => return Err(format!("artifact store: {why}")),
                }
            }
            Self::sweep(&made.dir);
            Ok(made)
        });
        match made {
            Ok(made) => Ok(&made.dir),
            Err(why) => Err(Error::new(ErrorKind::Internal, why.clone())),
        }
    }

    /// The store's directory, made or checked as its kind says.
    fn make(&self) -> std::result::Result<Made, String> {
        let dir = &self.dir;
        if self.kind == Kind::Private {
            return fresh_dir(dir, PRIVATE_PREFIX).map(|dir| Made { dir, private: true });
        }
        // `<state>/artifacts`: the state directory's own parents are the
        // user's to make (`~/.local/state`); the state directory and the
        // store are checked before anything is made in them.
        let state = dir.parent().unwrap_or(dir);
        if let Some(above) = state.parent() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(above)
                .map_err(|e| internal("create", above, &e).message().to_string())?;
        }
        let squatted = match own_dir(state)? {
            None => own_dir(dir)?,
            Some(why) => Some(why),
        };
        let Some(why) = squatted else {
            return Ok(Made {
                dir: dir.clone(),
                private: false,
            });
        };
        if self.kind == Kind::Default
            && let (Some(tmp), Some(name)) = (state.parent(), state.file_name())
        {
            let prefix = format!("{}-", name.to_string_lossy());
            let private = fresh_dir(tmp, &prefix)?;
            tracing::warn!(
                "artifact store: {why}; this process keeps its artifacts in {} (removed when it \
                 ends) instead. Remove {} (as its owner) or set `state_dir` to share artifacts \
                 between processes",
                private.display(),
                state.display()
            );
            return Ok(Made {
                dir: private,
                private: true,
            });
        }
        Err(format!(
            "artifact store: {why}; another user may have made it. Remove it (as its owner, or \
             root) or choose another `state_dir`"
        ))
    }

    /// Removes temporary files whose process is gone.
    fn sweep(dir: &Path) {
        let Ok(entries) = fs::read_dir(dir.join("tmp")) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let pid = name
                .to_str()
                .and_then(|n| n.split('.').next())
                .and_then(|p| p.parse::<i32>().ok());
            let alive = pid.is_some_and(pid_alive);
            if !alive {
                let _ = fs::remove_file(entry.path());
            }
        }
    }

    /// Where the blob of `sha256` is.
    ///
    /// # Errors
    ///
    /// `invalid_input` when `sha256` is not 64 lower-case hex digits.
    pub fn path_of(&self, sha256: &str) -> Result<PathBuf> {
        if !is_digest(sha256) {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "an artifact digest is 64 lower-case hex digits",
            ));
        }
        Ok(self.dir().join("sha256").join(&sha256[..2]).join(sha256))
    }

    /// Opens the blob of `sha256` for reading.
    ///
    /// # Errors
    ///
    /// `not_found` when the store holds no such blob.
    pub fn open_blob(&self, sha256: &str) -> Result<File> {
        let path = self.path_of(sha256)?;
        File::open(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::new(
                ErrorKind::NotFound,
                format!("no artifact has the digest {sha256}"),
            ),
            _ => internal("open", &path, &e),
        })
    }

    /// Stores what `reader` gives, at most `max` bytes.
    ///
    /// # Errors
    ///
    /// `limit` when `reader` gives more than `max` bytes (nothing is kept);
    /// `internal` on an I/O failure of the store; the reader's own error as
    /// `internal` too.
    pub fn put(&self, reader: &mut dyn Read, max: u64) -> Result<Stored> {
        let dir = self.ready()?;
        let n = NEXT_TEMP.fetch_add(1, Ordering::Relaxed);
        let temp = dir.join("tmp").join(format!("{}.{n}", std::process::id()));
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)
            .map_err(|e| internal("create", &temp, &e))?;
        let result = self.fill(&mut file, &temp, reader, max);
        drop(file);
        match result {
            Ok(stored) => self.settle(&temp, stored),
            Err(e) => {
                let _ = fs::remove_file(&temp);
                Err(e)
            }
        }
    }

    /// Copies and hashes into the temporary file, then `fsync`s it.
    fn fill(
        &self,
        file: &mut File,
        temp: &Path,
        reader: &mut dyn Read,
        max: u64,
    ) -> Result<Stored> {
        let mut hasher = Sha256::new();
        let mut head =
            Vec::with_capacity(HEAD_BYTES.min(usize::try_from(max).unwrap_or(HEAD_BYTES)));
        let mut tail: Vec<u8> = Vec::with_capacity(TAIL_BYTES);
        let mut size: u64 = 0;
        let mut buf = vec![0u8; CHUNK_BYTES];
        loop {
            let got = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(got) => got,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(Error::new(
                        ErrorKind::Internal,
                        format!("artifact store: cannot read the artifact's bytes: {e}"),
                    ));
                }
            };
            size += got as u64;
            if size > max {
                return Err(Error::new(
                    ErrorKind::Limit,
                    format!(
                        "the artifact grew past the {max} bytes reserved for it while it was stored (it changed while being published); publish it again when it no longer changes"
                    ),
                ));
            }
            let chunk = &buf[..got];
            hasher.update(chunk);
            file.write_all(chunk)
                .map_err(|e| internal("write", temp, &e))?;
            if head.len() < HEAD_BYTES {
                let take = (HEAD_BYTES - head.len()).min(chunk.len());
                head.extend_from_slice(&chunk[..take]);
            }
            let keep = chunk.len().min(TAIL_BYTES);
            tail.extend_from_slice(&chunk[chunk.len() - keep..]);
            if tail.len() > TAIL_BYTES {
                tail.drain(..tail.len() - TAIL_BYTES);
            }
        }
        file.sync_all().map_err(|e| internal("sync", temp, &e))?;
        let digest: [u8; 32] = hasher.finalize().into();
        let mut sha256 = String::with_capacity(64);
        for b in digest {
            sha256.push_str(&format!("{b:02x}"));
        }
        Ok(Stored {
            sha256,
            size,
            head,
            tail,
        })
    }

    /// Gives the temporary file its digest's name (or drops it when the
    /// store holds those bytes already) and makes the name durable.
    fn settle(&self, temp: &Path, stored: Stored) -> Result<Stored> {
        let target = self.path_of(&stored.sha256)?;
        let parent = target.parent().unwrap_or(self.dir()).to_path_buf();
        fs::create_dir_all(&parent).map_err(|e| internal("create", &parent, &e))?;
        if target.exists() {
            let _ = fs::remove_file(temp);
            return Ok(stored);
        }
        fs::set_permissions(temp, fs::Permissions::from_mode(0o400))
            .map_err(|e| internal("set the mode of", temp, &e))?;
        fs::rename(temp, &target).map_err(|e| internal("rename into", &target, &e))?;
        File::open(&parent)
            .and_then(|d| d.sync_all())
            .map_err(|e| internal("sync", &parent, &e))?;
        Ok(stored)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_bytes_are_stored_once_under_their_digest() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let a = store.put(&mut &b"hello\n"[..], 100).unwrap();
        let b = store.put(&mut &b"hello\n"[..], 100).unwrap();
        assert_eq!(a, b);
        // sha256("hello\n")
        assert_eq!(
            a.sha256,
            "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
        );
        let blobs: Vec<_> = walk(&dir.path().join("sha256"));
        assert_eq!(blobs.len(), 1, "{blobs:?}");
        assert_eq!(
            fs::read(store.path_of(&a.sha256).unwrap()).unwrap(),
            b"hello\n"
        );
        assert_eq!(fs::read_dir(dir.path().join("tmp")).unwrap().count(), 0);
    }

    #[test]
    fn more_bytes_than_reserved_keep_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let e = store.put(&mut &[7u8; 1000][..], 999).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Limit);
        assert!(walk(&dir.path().join("sha256")).is_empty());
        assert_eq!(fs::read_dir(dir.path().join("tmp")).unwrap().count(), 0);
    }

    #[test]
    fn head_and_tail_are_the_ends_of_the_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let bytes: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let s = store.put(&mut &bytes[..], 1 << 20).unwrap();
        assert_eq!(s.size, 200_000);
        assert_eq!(s.head, bytes[..HEAD_BYTES]);
        assert_eq!(s.tail, bytes[bytes.len() - TAIL_BYTES..]);
    }

    #[test]
    fn digests_are_checked_before_they_name_a_path() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        for bad in ["../../etc/passwd", "", &"A".repeat(64), &"0".repeat(63)] {
            assert_eq!(
                store.path_of(bad).unwrap_err().kind(),
                ErrorKind::InvalidInput
            );
        }
        let e = store.open_blob(&"0".repeat(64)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound);
    }

    #[test]
    fn temporary_files_of_dead_processes_are_swept() {
        let dir = tempfile::tempdir().unwrap();
        drop(Store::open(dir.path()).unwrap());
        // A pid that cannot exist (above the kernel's pid_max limit).
        let dead = dir.path().join("tmp").join("2147483647.0");
        let mine = dir
            .path()
            .join("tmp")
            .join(format!("{}.999999", std::process::id()));
        fs::write(&dead, b"torn").unwrap();
        fs::write(&mine, b"in flight").unwrap();
        drop(Store::open(dir.path()).unwrap());
        assert!(!dead.exists());
        assert!(mine.exists());
    }

    #[test]
    fn a_private_store_is_gone_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::private(dir.path());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
        store.put(&mut &b"x"[..], 1).unwrap();
        let made = store.dir().to_path_buf();
        assert!(made.starts_with(dir.path()) && made != dir.path());
        assert!(made.join("sha256").exists());
        drop(store);
        assert!(!made.exists());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_lazy_store_makes_nothing_until_it_stores_and_refuses_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let lazy = Store::lazy(&dir.path().join("state/artifacts"));
        assert!(!dir.path().join("state").exists());
        lazy.put(&mut &b"x"[..], 1).unwrap();
        assert_eq!(walk(&dir.path().join("state/artifacts/sha256")).len(), 1);
        let mode = fs::metadata(dir.path().join("state/artifacts"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        // A store directory that is a link (someone else's, in a shared
        // temp dir) is refused, and nothing is written through it.
        fs::create_dir(dir.path().join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), dir.path().join("link")).unwrap();
        let linked = Store::lazy(&dir.path().join("link"));
        let e = linked.put(&mut &b"x"[..], 1).unwrap_err();
        assert!(e.message().contains("not a directory of this user"), "{e}");
        assert!(walk(&dir.path().join("elsewhere")).is_empty());
    }

    fn walk(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for e in fs::read_dir(dir).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                out.extend(walk(&e.path()));
            } else {
                out.push(e.path());
            }
        }
        out
    }
}
