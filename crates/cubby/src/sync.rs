//! Locking that survives a panic: the one helper every layer's mutexes use.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, recovering the data of a poisoned lock (a panicking holder
/// never leaves cubby's structures half-written).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
